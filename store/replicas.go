package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// evalWait runs a script and then WAIT in one pipeline: go-redis sends a
// pipeline's commands on one connection, and WAIT covers the writes made on its
// own connection. Between the two goes a PUBLISH to a channel nobody listens on,
// which Redis replicates: it moves the connection's replication offset to the
// master's latest, so that WAIT also covers a grant the script only read (one made
// on another connection, as when a release hands the lock to a polling ticket).
// On a cluster, evalWaitCluster does the same on the slot's master.
//
// Script.Run's EVALSHA-then-EVAL fallback cannot work inside a pipeline (the
// NOSCRIPT error is only known once the pipeline has run), so it is done here: a
// NOSCRIPT reply means the script did not run, and the pipeline is sent again
// with EVAL. A broken connection is returned as the script's error, since whether
// the change reached a replica is then unknown.
func (s *Store) evalWait(ctx context.Context, op *scriptOp, keys []string, args []any) ([]any, error) {
	var v []any
	var acked int64
	var err error
	if s.cluster != nil {
		var werr error
		v, acked, werr, err = s.evalWaitCluster(ctx, op, keys, args)
		if err != nil {
			return nil, err
		}
		err = werr
	} else {
		var script, wait *redis.Cmd
		eval := false
		for range 4 {
			_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				script = p.Do(ctx, s.ss.cmdArgs(op, eval, keys, args)...)
				p.Publish(ctx, s.opt.Prefix+":wait", "")
				// Pipeliner has no Wait method.
				wait = p.Do(ctx, "wait", s.opt.WaitReplicas, s.opt.WaitTimeout.Milliseconds())
				return nil
			})
			if !s.resend(ctx, script.Err(), keys[0], &eval) {
				break
			}
		}
		if v, err = script.Slice(); err != nil {
			return nil, err
		}
		acked, err = wait.Int64()
	}
	if err != nil && redisconn.IsConnError(err) {
		return nil, err
	}
	if (err != nil || acked < int64(s.opt.WaitReplicas)) && changesHolder(v) {
		s.unacked(op.name, acked, err)
	}
	return v, nil
}

// changesHolder reports whether a script reply may have granted, renewed, freed
// or handed on a lock: every reply but the ones that change nothing a holder
// relies on.
func changesHolder(v []any) bool {
	if len(v) == 0 {
		return false
	}
	code, _ := v[0].(string)
	switch code {
	case "busy", "queued", "not_held", "gone":
		return false
	}
	return true
}

// unacked counts a change fewer replicas acknowledged than WaitReplicas within
// WaitTimeout, and warns, at most once a second (a replica that is down would
// otherwise log every grant).
func (s *Store) unacked(op string, acked int64, err error) {
	s.m.WaitUnacked.Inc()
	now := time.Now().UnixMilli()
	last := s.unackedLog.Load()
	if now-last < 1000 || !s.unackedLog.CompareAndSwap(last, now) {
		return
	}
	ev := s.opt.Logger.Warn().Str("op", op).Int64("acked", acked).Int("wanted", s.opt.WaitReplicas).
		Dur("timeout", s.opt.WaitTimeout)
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Msg("replicas did not acknowledge a grant in time: it stands, but a failover now could lose it " +
		"(counted in baton_wait_unacked_total; warned at most once a second)")
}

// evalWaitCluster is evalWait on a cluster: the script, an SPUBLISH to a
// channel of the script's own slot that nobody listens on (replicated like
// the script's writes, it moves the connection's replication offset to the
// shard's latest, as PUBLISH does on one Redis), and WAIT, in one pipeline on
// one connection to the slot's master. A MOVED reply sends the pipeline to the
// new master, an ASK reply to the importing one behind ASKING (neither ran the
// script); NOSCRIPT sends it again with EVAL.
func (s *Store) evalWaitCluster(ctx context.Context, op *scriptOp, keys []string, args []any) (v []any, acked int64, waitErr error, err error) {
	addr := s.topo.Master(keys[0])
	if addr == "" {
		c, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, nil, err
		}
		addr = c.Options().Addr
	}
	asking, eval := false, false
	tries := 0 // TRYAGAIN replies waited out
	for i := 0; i < 8; i++ {
		var script, wait *redis.Cmd
		_, _ = s.topo.Node(addr).Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "asking")
			}
			script = redisconn.OnceCmd{Cmd: redis.NewCmd(ctx, s.ss.cmdArgs(op, eval, keys, args)...)}.Cmd
			_ = p.Process(ctx, redisconn.OnceCmd{Cmd: script})
			if asking {
				p.Do(ctx, "asking")
			}
			p.SPublish(ctx, keys[0]+":wait", "")
			wait = p.Do(ctx, "wait", s.opt.WaitReplicas, s.opt.WaitTimeout.Milliseconds())
			return nil
		})
		if kind, slotNo, to, ok := redisconn.Redirect(script.Err()); ok {
			if kind == "MOVED" {
				s.topo.Moved(slotNo, to)
			}
			addr, asking = to, kind == "ASK"
			continue
		}
		if s.resend(ctx, script.Err(), keys[0], &eval) {
			continue
		}
		if redisconn.TryAgain(ctx, script.Err(), tries) {
			tries++
			i-- // not a redirect
			continue
		}
		v, err = script.Slice()
		if err != nil {
			return nil, 0, nil, err
		}
		acked, waitErr = wait.Int64()
		return v, acked, waitErr, nil
	}
	return nil, 0, nil, fmt.Errorf("%w: redirected too often", ErrUnavailable)
}
