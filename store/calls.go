package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The calls whose failure may leave something to undo (an acquire, a ticket
// poll) go through runCall, which retries one whose connection broke (as run
// does) and remembers, across both attempts, whether the script may have run
// or may still run: a call that never left this process (the connection was
// refused, the health gate is closed, the pool had no connection) is a
// definite failure, and nothing of it is undone.

// callError is a failed call of runCall.
type callError struct {
	err      error
	maybeRan bool // an attempt may have reached Redis, or may still
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// runCall runs a script as runGrant does (grant: its reply may tell a client it
// holds a lock), retrying it once when retry is set and its connection broke.
// A failure is a *callError.
func (s *Store) runCall(ctx context.Context, sc *redis.Script, op string, keys []string, grant, retry bool, args ...any) (reply, error) {
	// Both attempts under one hold of s.gate, as in call: Close waits for them,
	// and so for the undo a failure queues.
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return reply{}, &callError{err: fmt.Errorf("%s: store closed: %w", op, ErrUnavailable)}
	}
	if s.opt.Gate.Down() {
		return reply{}, &callError{err: fmt.Errorf("%s: %w: redis is down (health gate)", op, ErrUnavailable)}
	}
	ran := false
	for attempt := 0; ; attempt++ {
		rep, err, raw := s.attempt(ctx, sc, op, keys, grant && s.opt.WaitReplicas > 0, args)
		if raw == nil {
			if err != nil && ran {
				// The retry is answered with a failure ('expired', a reply it
				// cannot read), but the first attempt may have run, in time:
				// what it did is still to undo.
				return reply{}, &callError{err: err, maybeRan: true}
			}
			rep.echo = ran
			return rep, err
		}
		ran = ran || mayHaveRun(raw)
		if retry && attempt == 0 && ctx.Err() == nil && isConnError(raw) && !s.opt.Gate.Down() {
			continue
		}
		return reply{}, &callError{err: err, maybeRan: ran}
	}
}

// mayHaveRun reports whether an attempt that got no reply (raw, the client's
// error) may have reached Redis, or may still: a timeout, a broken
// connection, a context ended in flight. An error reply from Redis is
// definite, and so is a failure before anything was sent: a refused or
// timed-out dial, a pool with no connection to give.
func mayHaveRun(raw error) bool {
	var rerr redis.Error
	return !errors.As(raw, &rerr) && !isDialError(raw) && !errors.Is(raw, redis.ErrPoolTimeout)
}

// uncertain reports whether a failed call may still have run in Redis (or run
// later), so that what it may have done must be undone, and a tombstone must
// stop it should it run after the undo. Only runCall's failures can be; every
// other error is definite.
func uncertain(err error) bool {
	var ce *callError
	return errors.As(err, &ce) && ce.maybeRan
}
