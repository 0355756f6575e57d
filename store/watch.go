package store

import (
	"context"
	"fmt"
	"time"
)

// Watch returns the lock's state, first waiting up to wait while it is held with
// the given fence (nil: its fence now), for its holds to change: a hold released,
// expired or added, or the lock changing hands. Errors: ErrTooManyWaiters,
// ErrUnavailable.
func (s *Store) Watch(ctx context.Context, name string, fence *int64, wait time.Duration) (State, error) {
	var st State
	var err error
	done := make(chan struct{})
	s.WatchFunc(ctx, name, fence, wait, func(x State, e error) { st, err = x, e; close(done) })
	<-done
	return st, err
}

// WatchFunc is Watch handing its answer to f, which it calls exactly once:
// before it returns when the answer needs no wait, else on a goroutine of its
// own once the answer is known. No goroutine is held while it waits.
func (s *Store) WatchFunc(ctx context.Context, name string, fence *int64, wait time.Duration, f func(State, error)) {
	st, err := s.state(ctx, name, wait)
	if err != nil || wait <= 0 || !st.Held || (fence != nil && *fence != st.Fence) || s.shuttingDown() {
		f(st, err)
		return
	}
	if err := s.reserveWaiter(); err != nil {
		f(State{}, err)
		return
	}
	sw := &stateWatch{s: s, ctx: ctx, name: name, fence: st.Fence, holders: st.Holders, f: f, ev: newEventWait(),
		until: time.Now().Add(wait)}
	sw.w = s.disp.add(name, s.channel(name), kindWatch, "", false, sw.ev.wake)
	sw.ev.start(s, ctx, wait, sw.step, func(err error) { sw.finish(State{}, err) })
}

// stateWatch is a watch's wait (WatchFunc).
type stateWatch struct {
	s       *Store
	ctx     context.Context
	name    string
	fence   int64 // the holds watched: the lock's fence and its number of holders
	holders int
	until   time.Time
	w       *waiter
	ev      *eventWait
	f       func(State, error)
}

func (sw *stateWatch) step(ev event) bool {
	s := sw.s
	switch {
	case ev&evGone != 0:
		return sw.finish(State{}, fmt.Errorf("watch: %w: %w", ErrUnavailable, sw.ctx.Err()))
	case ev&(evShutdown|evDeadline) != 0:
		return sw.finish(s.State(sw.ctx, sw.name))
	}
	s.disp.take(sw.w)
	st, err := s.state(sw.ctx, sw.name, max(time.Until(sw.until), 0))
	if err != nil || !st.Held || st.Fence != sw.fence || st.Holders != sw.holders {
		return sw.finish(st, err)
	}
	s.disp.observe(sw.w, soonestEnd(st))
	return false
}

// finish ends the wait and hands its answer on.
func (sw *stateWatch) finish(st State, err error) bool {
	sw.ev.end()
	sw.s.disp.remove(sw.w, false)
	sw.s.releaseWaiter()
	sw.f(st, err)
	return true
}

// soonestEnd is the time until the first of the listed holds ends: when a watch
// should look again even if nobody announces anything (expiry runs no script).
func soonestEnd(st State) time.Duration {
	d := st.TTL
	for _, h := range st.Holds {
		d = min(d, h.TTL)
	}
	return d
}
