//go:build tools

// Package tools pins the versions of the command-line tools `make lint` runs, in a
// module of their own so they never enter Baton's dependency graph.
package tools

import _ "github.com/daveshanley/vacuum"
