package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// Late copies, one rule. A script call whose connection broke or timed out
// may still run later: its bytes are in the kernel's buffers, and a frozen
// Redis runs them when it wakes. Every call that changes a lock therefore
// carries a "not after" on the Redis clock (clock.go), under the read timeout,
// and a script past it changes nothing ('expired'). The store decides what an
// unknown outcome meant only once that deadline has passed: then no copy can
// run any more, so a call sent again, a read or an undo sees the final state,
// and nothing needs to remember the copies (no tombstones).

// call is one script call: its operation, keys, and ARGV for a "not after".
type call struct {
	op   *scriptOp
	name string // names the call's span when traced; default the operation's
	keys []string
	args func(notAfter string) []any
	// again: an attempt whose outcome is unknown may be sent again once its
	// deadline has passed (the script recognises its own ids and answers
	// what the first attempt made). Re-entry, release and force may not.
	again bool
	// grant: the reply may tell a client it holds a lock or hand a lock on,
	// so with WaitReplicas it is used only after WAIT.
	grant bool
	// timeless: the script takes no "not after" (it only applies what time
	// has done, or is harmless whenever it runs): no stamp, and an attempt
	// with an unknown outcome is sent again at once when again is set.
	timeless bool
}

// callError is a failed call. unknown: an attempt may have run, or may still
// have run until its deadline, which has passed by the time this is returned.
type callError struct {
	err     error
	unknown bool
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// unknown reports an error after which what the call may have made is
// unknown to its caller (and must be undone or answered another way).
func unknown(err error) bool {
	var ce *callError
	return errors.As(err, &ce) && ce.unknown
}

// run makes the call and decodes its reply. A failure is a *callError.
// Errors: ErrUnavailable once the store is closed, and those of tries.
func (s *Store) run(ctx context.Context, c call) (reply, error) {
	s.inFlight.RLock()
	defer s.inFlight.RUnlock()
	if s.closed {
		return reply{}, &callError{err: fmt.Errorf("%s: store closed: %w", c.op.name, ErrUnavailable)}
	}
	return s.tries(ctx, c)
}

// tries makes the call: a second attempt when the first was never sent, or
// (with c.again) once the first's outcome stayed unknown past its deadline.
func (s *Store) tries(ctx context.Context, c call) (reply, error) {
	ran := false    // an attempt may have run
	var first error // what the attempt that may have run was answered
	for attempt := 0; ; attempt++ {
		if s.opt.Gate.Down() {
			return reply{}, &callError{err: fmt.Errorf("%s: %w: redis is down (health gate)", c.op.name, ErrUnavailable),
				unknown: ran}
		}
		st, rep, err, raw, sent := s.send(ctx, c)
		if !sent {
			if ran {
				// Refused before it was sent (no turn: overloaded, say): the
				// answer is still the first attempt's, which may have run.
				return reply{}, &callError{err: first, unknown: true}
			}
			return reply{}, &callError{err: fmt.Errorf("%s: %w", c.op.name, err)}
		}
		switch {
		case raw == nil && err == nil && rep.code == "expired":
			// Definite: it changed nothing. The clock estimate may be off
			// (the Redis clock stepped): sample it again, and try once more.
			if attempt == 0 {
				if clk, rc := s.clockOf(c.keys[0]); clk != nil {
					sampleClock(context.WithoutCancel(ctx), rc, clk, true)
				}
				continue
			}
			return reply{}, &callError{err: fmt.Errorf("%s: %w: %w", c.op.name, ErrUnavailable, errExpired), unknown: ran}
		case raw == nil && err != nil && ran:
			return reply{}, &callError{err: err, unknown: true}
		case raw == nil:
			return rep, err
		case !mayHaveRun(raw):
			// Never sent: definite, and safe to send again once.
			if attempt == 0 && ctx.Err() == nil && redisconn.IsConnError(raw) && !s.opt.Gate.Down() {
				continue
			}
			if ran {
				return reply{}, &callError{err: first, unknown: true}
			}
			return reply{}, &callError{err: err}
		}
		// Unknown: wait until no copy of it can run any more.
		ran, first = true, err
		if !c.timeless {
			wait(st.passed)
			s.confirmPast(c.keys[0], st.notAfter)
		}
		if c.again && attempt == 0 && ctx.Err() == nil && !s.opt.Gate.Down() {
			continue
		}
		return reply{}, &callError{err: err, unknown: true}
	}
}

// wait sleeps until t.
func wait(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// send sends a call once, in its turn (admission.go), stamped once it has the
// turn. sent is false when it was not sent (no turn, no stamp): err says why.
func (s *Store) send(ctx context.Context, c call) (st stamp, rep reply, err, raw error, sent bool) {
	t := s.turnsFor(c.keys[0])
	if err := t.enter(ctx); err != nil {
		return stamp{}, reply{}, err, nil, false
	}
	if !c.timeless {
		if st, err = s.stamp(ctx, c.keys[0]); err != nil {
			t.leave(false)
			return stamp{}, reply{}, err, nil, false
		}
	}
	rep, err, raw = s.attempt(ctx, c, st.notAfter)
	t.leave(raw == nil)
	return st, rep, err, raw, true
}

// confirmPast waits until key's Redis reads a time past notAfter: the
// estimate said so, but either clock may have stepped since it was made (an
// NTP step, a failover to a host whose clock is behind). Bounded by
// confirmPastFor; a Redis that does not answer leaves the estimate's word.
func (s *Store) confirmPast(key, notAfter string) {
	na, err := strconv.ParseInt(notAfter, 10, 64)
	clk, c := s.clockOf(key)
	if err != nil || clk == nil {
		return
	}
	give := time.Now().Add(confirmPastFor)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		now, err := c.Time(ctx).Result()
		cancel()
		if err != nil || now.UnixMilli() > na {
			return
		}
		if time.Now().After(give) {
			s.opt.Logger.Warn().Dur("behind", time.Duration(na-now.UnixMilli())*time.Millisecond).
				Msg("the Redis clock stepped back: deciding a call's outcome before its deadline passed there")
			return
		}
		time.Sleep(time.Duration(na-now.UnixMilli()+1) * time.Millisecond)
		sampleClock(context.Background(), c, clk, true) // the estimate was off: take a new one
	}
}

// confirmPastFor bounds how long confirmPast waits for a Redis clock that
// stepped back.
const confirmPastFor = time.Minute

// attempt sends a call once. raw is the client's error when it got no reply.
// The call does not end when the request's client goes away (its context
// keeps only its values): its reply is what decides what the request made.
func (s *Store) attempt(ctx context.Context, c call, notAfter string) (rep reply, err, raw error) {
	name := c.name
	if name == "" {
		name = c.op.name
	}
	ctx = redisconn.WithOp(context.WithoutCancel(ctx), name) // names its span when traced
	args := c.args(notAfter)
	var v []any
	if c.grant && s.opt.WaitReplicas > 0 {
		v, raw = s.evalWait(ctx, c.op, c.keys, args)
	} else {
		v, raw = s.exec(ctx, c.op, c.keys, args)
	}
	if raw == nil {
		rep, err := decodeReply(v)
		return rep, err, nil
	}
	var rerr redis.Error
	if errors.As(raw, &rerr) && !redisconn.IsConnError(raw) {
		// An error reply: the script ran (and failed) or never ran; either way
		// it is over.
		return reply{}, s.storeErr(c.op.name, raw), nil
	}
	s.clusterErr(raw)
	if redisconn.IsDialError(raw) {
		// Redis refuses connections (or they time out): keep everyone else away
		// until it answers again. A broken connection alone is not that: the
		// next call dials a new one.
		s.opt.Gate.MarkDown()
	}
	return reply{}, s.storeErr(c.op.name, raw), raw
}

// mayHaveRun reports whether an attempt that got no reply (raw, the client's
// error) may have reached Redis: a timeout, a broken connection. A failure
// before anything was sent is definite: a refused or timed-out dial, a pool
// with no connection to give.
func mayHaveRun(raw error) bool {
	return !redisconn.IsDialError(raw) && !errors.Is(raw, redis.ErrPoolTimeout) && !errors.Is(raw, redis.ErrClosed)
}

// errExpired: a call reached the store after its "not after" and changed
// nothing; definite, so nothing is undone.
var errExpired = errors.New("call reached the store too late")

// clientGone is the error of a request whose client went away: nobody reads it.
func clientGone(op string, ctx context.Context) error {
	return fmt.Errorf("%s: client gone: %w: %w", op, ErrUnavailable, ctx.Err())
}
