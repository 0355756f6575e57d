package store_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// awaitCond polls cond (what it waits for announces itself nowhere else) until
// it holds or 10 s pass.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A waiting long-poll holds no goroutine (tens of thousands of them
// must cost memory, not stacks): hundreds of acquires,
// ticket polls and watches wait with the process's goroutines back to what
// they were, and each is answered exactly once, here by the shutdown.
func TestWaitsHoldNoGoroutine(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	s := newStore(t, store.Options{Metrics: m, MaxWaiters: 10000, TicketTTL: time.Minute})
	hold, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	tickets := make([]*store.Ticket, n)
	for i := range tickets {
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Fair: true})
		if err != nil || res.Ticket == nil {
			t.Fatalf("ticket %d: %+v %v", i, res, err)
		}
		tickets[i] = res.Ticket
	}
	base := runtime.NumGoroutine()

	var acquired, polled, watched, twice atomic.Int64
	answered := func(c *atomic.Int64, seen *atomic.Bool) {
		if seen.Swap(true) {
			twice.Add(1)
		}
		c.Add(1)
	}
	for i := range n {
		var a, p, w atomic.Bool
		s.AcquireFunc(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: time.Minute}, func(res store.AcquireResult, err error) {
			if !errors.Is(err, store.ErrLockHeld) {
				t.Errorf("acquire %d: %+v %v, want ErrLockHeld at shutdown", i, res, err)
			}
			answered(&acquired, &a)
		})
		s.PollFunc(ctx, store.Ref{Name: "x", ID: tickets[i].ID}, time.Minute, func(res store.PollResult, err error) {
			if err != nil || res.Ticket == nil {
				t.Errorf("poll %d: %+v %v, want its ticket at shutdown", i, res, err)
			}
			answered(&polled, &p)
		})
		s.WatchFunc(ctx, "x", nil, time.Minute, func(st store.State, err error) {
			if err != nil || !st.Held || st.Fence != hold.Lease.Fence {
				t.Errorf("watch %d: %+v %v, want the held state at shutdown", i, st, err)
			}
			answered(&watched, &w)
		})
	}
	awaitCond(t, "every request waiting", func() bool { return testutil.ToFloat64(m.Waiters) == 3*n })
	awaitCond(t, "the first looks' goroutines to end", func() bool { return runtime.NumGoroutine() <= base+5 })
	if got := acquired.Load() + polled.Load() + watched.Load(); got != 0 {
		t.Fatalf("%d answered before the shutdown", got)
	}

	s.Shutdown()
	awaitCond(t, "every wait answered", func() bool { return acquired.Load()+polled.Load()+watched.Load() == 3*n })
	if twice.Load() != 0 {
		t.Fatalf("%d waits answered twice", twice.Load())
	}
	awaitCond(t, "the waiter gauge back at 0", func() bool { return testutil.ToFloat64(m.Waiters) == 0 })
}

// AcquireFunc, PollFunc and WatchFunc answer before they return when no wait is
// needed, so that a caller knows at once whether the request waits.
func TestFuncsAnswerAtOnceWithoutWait(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, store.Options{})
	var l *store.Lease
	s.AcquireFunc(ctx, store.AcquireRequest{Name: "free", TTL: time.Minute, Wait: time.Minute}, func(res store.AcquireResult, err error) {
		if err != nil {
			t.Fatal(err)
		}
		l = res.Lease
	})
	if l == nil {
		t.Fatal("a free lock's acquire with a wait did not answer before AcquireFunc returned")
	}
	done := false
	s.WatchFunc(ctx, "other", nil, time.Minute, func(st store.State, err error) { done = err == nil && !st.Held })
	if !done {
		t.Fatal("a watch of a free lock did not answer before WatchFunc returned")
	}
	done = false
	s.PollFunc(ctx, store.Ref{Name: "free", ID: "nonsense"}, time.Minute, func(_ store.PollResult, err error) {
		done = errors.Is(err, store.ErrTicketGone)
	})
	if !done {
		t.Fatal("a poll of an unknown ticket did not answer ErrTicketGone before PollFunc returned")
	}
}

// A waiting request whose context ends is answered once, with a client-gone
// error, leaves nothing in Redis, and frees its waiter slot.
func TestFuncClientGoneWhileWaiting(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			ctx := context.Background()
			m := metrics.New()
			s := newStore(t, store.Options{Metrics: m})
			hold, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			answers := make(chan error, 2)
			s.AcquireFunc(wctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: time.Minute, Fair: fair},
				func(_ store.AcquireResult, err error) { answers <- err })
			awaitCond(t, "the request waiting", func() bool { return testutil.ToFloat64(m.Waiters) == 1 })
			cancel()
			if err := <-answers; !errors.Is(err, context.Canceled) || !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("answer: %v, want a client-gone ErrUnavailable", err)
			}
			awaitCond(t, "the waiter slot freed", func() bool { return testutil.ToFloat64(m.Waiters) == 0 })
			// A fair request's ticket is undone in the background.
			awaitCond(t, "the holder alone", func() bool {
				st, err := s.State(ctx, "x")
				return err == nil && st.Waiters == 0 && st.Fence == hold.Lease.Fence
			})
			select {
			case err := <-answers:
				t.Fatalf("answered twice (second: %v)", err)
			default:
			}
		})
	}
}

// A lock freed by its lease running out reaches the next waiter at once, for
// every ttl the server accepts: also a lease that outlives the fence guard
// (BATON_FENCE_GUARD, default 1 h, against ttls of up to 24 h).
func TestAWaiterIsWokenByTheExpiryOfALeaseThatOutlivesTheFenceGuard(t *testing.T) {
	s := newStore(t, store.Options{FenceGuard: time.Second})
	h, err := s.Acquire(as("H"), store.AcquireRequest{Name: "x", TTL: 2 * time.Second, Owner: "H"})
	if err != nil || h.Lease == nil {
		t.Fatalf("H: %+v %v", h, err)
	}
	end := time.Now().Add(h.Lease.TTL)
	const wait = 30 * time.Second
	w := request(as("W"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: wait, Owner: "W"})
	// "At once" is 50 ms; a loaded machine gets far more, and a lost wake-up
	// is answered only at the end of W's wait.
	const bound = 5 * time.Second
	select {
	case a := <-w:
		if a.err != nil || a.res.Lease == nil {
			t.Fatalf("W: %+v %v, want the lease H's expiry freed", a.res, a.err)
		}
		t.Logf("W granted %v after H's lease ran out", time.Since(end).Round(time.Millisecond))
	case <-time.After(time.Until(end) + bound):
		t.Fatalf("W, waiting %v for x, not granted %v after H's lease (2 s, one second past the fence guard) ran out: "+
			"the expiry's wake-up was lost", wait, bound)
	}
}
