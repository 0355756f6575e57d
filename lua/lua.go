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
	//go:embed session_holds.lua
	sessionHolds string
)

//go:embed session_lib.lua
var sessionLib string

var (
	//go:embed session_create.lua
	sessionCreate string
	//go:embed session_get.lua
	sessionGet string
	//go:embed session_join.lua
	sessionJoin string
	//go:embed session_leave.lua
	sessionLeave string
	//go:embed session_renew.lua
	sessionRenew string
	//go:embed session_end.lua
	sessionEnd string
	//go:embed session_check.lua
	sessionCheck string
	//go:embed session_finish.lua
	sessionFinish string
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
	// SessionHolds acts on a session's holds in one lock.
	SessionHolds = lib + sessionHolds
)

// Session script sources (on a session's own slot), each with session_lib.lua
// prepended. Compose makes them runnable.
var (
	SessionCreate = sessionLib + sessionCreate
	SessionGet    = sessionLib + sessionGet
	SessionJoin   = sessionLib + sessionJoin
	SessionLeave  = sessionLib + sessionLeave
	SessionRenew  = sessionLib + sessionRenew
	SessionEnd    = sessionLib + sessionEnd
	SessionCheck  = sessionLib + sessionCheck
	SessionFinish = sessionLib + sessionFinish
)

// Settings are what lib.lua leaves to the loader (durations in milliseconds).
type Settings struct {
	FenceGuardMs       int64 // how long a lock's fence key outlives its last grant (BATON_FENCE_GUARD)
	IdempotencyGraceMs int64 // how long an Idempotency-Key is remembered after what it made ended
	// Sharded makes the scripts announce with SPUBLISH (Redis Cluster's sharded
	// pub/sub, whose messages stay on the shard of the lock's slot) instead of
	// PUBLISH, which a cluster sends to every node.
	Sharded bool
}

// Defaults are the settings of a store with default Options.
var Defaults = Settings{FenceGuardMs: 3600000, IdempotencyGraceMs: 60000}

// Compose returns a script source ready to load: src with the settings lib.lua
// leaves to the loader defined ahead of it.
func Compose(src string, set Settings) string {
	publish := "PUBLISH"
	if set.Sharded {
		publish = "SPUBLISH"
	}
	return "local PUBLISH = '" + publish + "'\n" +
		"local FENCE_GUARD_MS = " + strconv.FormatInt(set.FenceGuardMs, 10) + "\n" +
		"local IDEMPOTENCY_GRACE_MS = " + strconv.FormatInt(set.IdempotencyGraceMs, 10) + "\n" + src
}
