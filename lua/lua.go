// Package lua holds Baton's Redis scripts, one file per operation, each defining
// a function of (KEYS, ARGV) and headed by a comment block naming its KEYS, ARGV
// and replies. lib.lua (the key layout and the helpers of the lock scripts) and
// session_lib.lua come first.
//
// Build puts them together two ways: as one Redis Functions library (FUNCTION
// LOAD once per server, then FCALL), so the helpers are made once, not on every
// call; and as one EVAL script per operation, for a server without FUNCTION
// (the embedded store).
package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
)

var (
	//go:embed lib.lua
	lib string
	//go:embed session_lib.lua
	sessionLib string
)

// Ops are the operations, by name (the name of the function each file defines).
var Ops = map[string]string{
	"acquire":        acquire,
	"renew":          renew,
	"release":        release,
	"force":          force,
	"state":          state,
	"poll":           poll,
	"cancel":         cancel,
	"poke":           poke,
	"undo":           undo,
	"session_holds":  sessionHolds,
	"session_create": sessionCreate,
	"session_get":    sessionGet,
	"session_join":   sessionJoin,
	"session_leave":  sessionLeave,
	"session_renew":  sessionRenew,
	"session_end":    sessionEnd,
	"session_check":  sessionCheck,
	"session_finish": sessionFinish,
}

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
	//go:embed undo.lua
	undo string
	//go:embed session_holds.lua
	sessionHolds string
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

// Settings are what the scripts leave to the loader (durations in milliseconds).
type Settings struct {
	FenceGuardMs       int64 // how long a lock's key outlives its last grant (BATON_FENCE_GUARD)
	IdempotencyGraceMs int64 // how long an Idempotency-Key is remembered after what it made ended
	// Sharded makes the scripts announce with SPUBLISH (Redis Cluster's sharded
	// pub/sub, whose messages stay on the shard of the lock's slot) instead of
	// PUBLISH, which a cluster sends to every node.
	Sharded bool
}

// Defaults are the settings of a store with default Options.
var Defaults = Settings{FenceGuardMs: 3600000, IdempotencyGraceMs: 60000}

// Library is the scripts built for one set of Settings.
type Library struct {
	// Name is the Functions library's name, baton_ and a hash of its code, so
	// that gateways of other versions or settings on one Redis each load their own.
	Name string
	Code string            // the FUNCTION LOAD body
	Func map[string]string // operation -> its function's name in the library
	Eval map[string]string // operation -> its EVAL script
}

// Build returns the scripts for set.
func Build(set Settings) *Library {
	publish := "PUBLISH"
	if set.Sharded {
		publish = "SPUBLISH"
	}
	prelude := "local PUBLISH = '" + publish + "'\n" +
		"local FENCE_GUARD_MS = " + strconv.FormatInt(set.FenceGuardMs, 10) + "\n" +
		"local GRACE_MS = " + strconv.FormatInt(set.IdempotencyGraceMs, 10) + "\n" + lib + sessionLib
	names := slices.Sorted(maps.Keys(Ops))
	var body strings.Builder
	body.WriteString(prelude)
	for _, op := range names {
		body.WriteString(Ops[op])
	}
	sum := sha1.Sum([]byte(body.String()))
	l := &Library{Name: "baton_" + hex.EncodeToString(sum[:6]), Func: map[string]string{}, Eval: map[string]string{}}
	for _, op := range names {
		l.Func[op] = l.Name + "_" + op
		body.WriteString("redis.register_function('" + l.Func[op] + "', " + op + ")\n")
		l.Eval[op] = prelude + Ops[op] + "return " + op + "(KEYS, ARGV)\n"
	}
	l.Code = "#!lua name=" + l.Name + "\n" + body.String()
	return l
}
