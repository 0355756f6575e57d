// Package api holds the contract, openapi.yaml, embedded so the server can serve it
// and the tests can validate every response against it.
package api

import _ "embed"

// Spec is api/openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
