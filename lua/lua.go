// Package lua holds Baton's Redis scripts, one file per operation. Each file starts
// with a comment block naming its KEYS, ARGV and replies; lib.lua holds the helpers
// and key layout they share and is prepended to every script here, so each script
// stays a single atomic call.
package lua

import (
	_ "embed"
	"strconv"
)

//go:embed lib.lua
var lib string

var (
	//go:embed acquire.lua
	acquire string
	//go:embed renew.lua
	renew string
	//go:embed release.lua
	release string
	//go:embed force.lua
	force string
	//go:embed state.lua
	state string
	//go:embed poll.lua
	poll string
	//go:embed cancel.lua
	cancel string
	//go:embed poke.lua
	poke string
	//go:embed abandon.lua
	abandon string
	//go:embed unpoll.lua
	unpoll string
)

// Script sources, each with lib.lua prepended. Compose makes them runnable.
var (
	Acquire = lib + acquire
	Renew   = lib + renew
	Release = lib + release
	Force   = lib + force
	State   = lib + state
	Poll    = lib + poll
	Cancel  = lib + cancel
	Poke    = lib + poke
	Abandon = lib + abandon
	Unpoll  = lib + unpoll
)

// Compose returns a script source ready to load: src with the settings lib.lua
// leaves to the loader defined ahead of it. fenceGuardMs is how long, in
// milliseconds, a lock's fence key outlives its last grant (BATON_FENCE_GUARD).
func Compose(src string, fenceGuardMs int64) string {
	return "local FENCE_GUARD_MS = " + strconv.FormatInt(fenceGuardMs, 10) + "\n" + src
}
