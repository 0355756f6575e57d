package store

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/lua"
	"github.com/batonhq/baton/store/redisconn"
)

// The scripts run as one Redis Functions library (lua.Library), loaded once
// per server with FUNCTION LOAD and called with FCALL: its helpers are made
// when it loads, not on every call. A server that has no FUNCTION (the
// embedded store, Redis before 7) answers FCALL "unknown command", and the
// store falls back, for good, to one EVAL script per operation (EVALSHA, and
// EVAL when the server lacks it). A server that restarted empty answers
// "Function not found", and the library is loaded again: neither answer ran
// anything, so the call is sent again.

// scriptOp is one operation of the library.
type scriptOp struct {
	name string        // the operation ("acquire"); names its span when traced
	fn   string        // its function in the library
	eval *redis.Script // its EVAL form
	src  string        // that script's source
}

// scriptSet is the library built for the store's settings.
type scriptSet struct {
	lib    *lua.Library
	noFunc atomic.Bool // the server has no FUNCTION: EVAL from now on

	acquire, renew, release, force, state, poll, cancel, poke, undo, sessionHolds  *scriptOp
	sessionCreate, sessionGet, sessionJoin, sessionLeave, sessionRenew, sessionEnd *scriptOp
	sessionCheck, sessionFinish                                                    *scriptOp
}

func newScriptSet(set lua.Settings) *scriptSet {
	lib := lua.Build(set)
	op := func(name string) *scriptOp {
		return &scriptOp{name: name, fn: lib.Func[name], eval: redis.NewScript(lib.Eval[name]), src: lib.Eval[name]}
	}
	return &scriptSet{lib: lib,
		acquire: op("acquire"), renew: op("renew"), release: op("release"), force: op("force"),
		state: op("state"), poll: op("poll"), cancel: op("cancel"), poke: op("poke"), undo: op("undo"),
		sessionHolds: op("session_holds"), sessionCreate: op("session_create"), sessionGet: op("session_get"),
		sessionJoin: op("session_join"), sessionLeave: op("session_leave"), sessionRenew: op("session_renew"),
		sessionEnd: op("session_end"), sessionCheck: op("session_check"), sessionFinish: op("session_finish"),
	}
}

func (ss *scriptSet) all() []*scriptOp {
	return []*scriptOp{ss.acquire, ss.renew, ss.release, ss.force, ss.state, ss.poll, ss.cancel, ss.poke, ss.undo,
		ss.sessionHolds, ss.sessionCreate, ss.sessionGet, ss.sessionJoin, ss.sessionLeave, ss.sessionRenew,
		ss.sessionEnd, ss.sessionCheck, ss.sessionFinish}
}

// cmdArgs is the command that runs op on keys with args: FCALL, or EVALSHA
// (eval false) or EVAL (eval true) where the server has no FUNCTION.
func (ss *scriptSet) cmdArgs(op *scriptOp, eval bool, keys []string, args []any) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	switch {
	case !ss.noFunc.Load():
		a = append(a, "fcall", op.fn, len(keys))
	case eval:
		a = append(a, "eval", op.src, len(keys))
	default:
		a = append(a, "evalsha", op.eval.Hash(), len(keys))
	}
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

// resend reports whether a script call answered err must be sent again, and
// how: the library was loaded (reload: the server lacked it), the server has
// no FUNCTION (from now on EVAL), or it lacked the EVAL script (eval). None of
// these answers ran anything.
func (s *Store) resend(ctx context.Context, err error, key string, eval *bool) bool {
	switch {
	case err == nil:
		return false
	case redis.HasErrorPrefix(err, "Function not found"):
		// On a cluster, every master: the call may have been redirected (a
		// slot migrating to a node that never had it) or promoted (a master
		// restarted empty).
		if s.cluster != nil {
			key = ""
		}
		return s.loadLibrary(ctx, key) == nil
	case isUnknownCommand(err, "fcall"):
		s.ss.noFunc.Store(true)
		return true
	case redis.HasErrorPrefix(err, "NOSCRIPT") && !*eval:
		*eval = true
		return true
	}
	return false
}

func isUnknownCommand(err error, cmd string) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := strings.ToLower(rerr.Error())
	return strings.Contains(msg, "unknown command") && strings.Contains(msg, cmd)
}

// loadLibrary loads the library on the server that holds key (every master of
// a cluster when key is ""); a library of that name there already is the same
// code (its name is its hash).
func (s *Store) loadLibrary(ctx context.Context, key string) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, s.ss.lib.Code).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		if isUnknownCommand(err, "function") {
			s.ss.noFunc.Store(true)
			return nil
		}
		return err
	}
	if s.cluster == nil {
		return load(ctx, s.rdb)
	}
	if key == "" {
		return s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	c, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	return load(ctx, c)
}

// loadScripts makes every operation runnable: the library, or the EVAL
// scripts where the server has no FUNCTION.
func (s *Store) loadScripts(ctx context.Context) error {
	if !s.ss.noFunc.Load() {
		if err := s.loadLibrary(ctx, ""); err != nil {
			return err
		}
		if !s.ss.noFunc.Load() {
			return nil
		}
	}
	all := s.ss.all()
	hashes := make([]string, len(all))
	for i, op := range all {
		hashes[i] = op.eval.Hash()
	}
	loaded, err := s.rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		return err
	}
	for i, ok := range loaded {
		if !ok {
			if err := all[i].eval.Load(ctx, s.rdb).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// exec sends one script call and returns its reply values. It is sent at most
// once as far as the outcome may be unknown; only answers that ran nothing
// (resend) make it go again.
func (s *Store) exec(ctx context.Context, op *scriptOp, keys []string, args []any) ([]any, error) {
	eval := false
	for range 4 {
		cmd := redis.NewCmd(ctx, s.ss.cmdArgs(op, eval, keys, args)...)
		s.process(ctx, cmd)
		if !s.resend(ctx, cmd.Err(), keys[0], &eval) {
			return cmd.Slice()
		}
	}
	return nil, errors.New("script could not be loaded")
}

// process sends cmd once: on a cluster without go-redis's retries after a
// connection error (redisconn.OnceCmd), waiting out a slot's migration (TRYAGAIN).
func (s *Store) process(ctx context.Context, cmd *redis.Cmd) {
	if s.cluster == nil {
		_ = s.rdb.Process(ctx, cmd)
		return
	}
	for attempt := 0; ; attempt++ {
		once := redisconn.OnceCmd{Cmd: cmd}
		_ = s.cluster.Process(ctx, once)
		if !redisconn.TryAgain(ctx, cmd.Err(), attempt) {
			return
		}
		*cmd = *redis.NewCmd(ctx, cmd.Args()...)
	}
}

// execPipelined sends one call of op per entry of keys and args in one
// pipeline (one per node on a cluster), each at most once, and returns each
// call's command. Calls answered with what ran nothing (a library or script
// the server lacked) are sent again, alone.
func (s *Store) execPipelined(ctx context.Context, op *scriptOp, keys [][]string, args [][]any) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(keys))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range keys {
			cmds[i] = redis.NewCmd(ctx, s.ss.cmdArgs(op, false, keys[i], args[i])...)
			if s.cluster != nil {
				_ = p.Process(ctx, redisconn.OnceCmd{Cmd: cmds[i]}) // a batch on a node that stalls is not sent again
			} else {
				_ = p.Process(ctx, cmds[i])
			}
		}
		return nil
	})
	for i, c := range cmds {
		eval := false
		if s.resend(ctx, c.Err(), keys[i][0], &eval) {
			v, err := s.exec(ctx, op, keys[i], args[i])
			cmds[i] = redis.NewCmd(ctx)
			if err != nil {
				cmds[i].SetErr(err)
			} else {
				cmds[i].SetVal(v)
			}
		}
	}
	return cmds
}
