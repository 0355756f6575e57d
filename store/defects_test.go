package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
)

// A ticket handed the lock while its waiter polls is answered straight from the
// grant message; its ttl must come from the grant (Redis's clock is the
// authority), not from comparing the grant time on Redis's clock with this
// process's clock. The embedded store's clock is set an hour behind ours.
func TestHandoffTTLFromRedisClock(t *testing.T) {
	ctx := context.Background()
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		m := miniredis.RunT(t)
		m.SetTime(time.Now().Add(skew))
		rdb, err := store.NewClient("redis://" + m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		s := store.New(rdb, store.Options{Prefix: "k", Logger: zerolog.New(zerolog.NewTestWriter(t))})
		t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })

		h, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: 30 * time.Second, Fair: true})
		if err != nil || q.Ticket == nil {
			t.Fatalf("enqueue: %+v %v", q, err)
		}
		got := make(chan store.PollResult, 1)
		go func() {
			res, err := s.Poll(ctx, store.Ref{Name: "x", ID: q.Ticket.ID}, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- res
		}()
		// Release once the poll is in flight (Redis has its poll deadline).
		deadline := time.Now().Add(5 * time.Second)
		for s.PollsInFlight(ctx, "x", q.Ticket.ID) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the poll never reached Redis")
			}
			time.Sleep(time.Millisecond)
		}
		if _, err := s.Release(ctx, store.Ref{Name: "x", ID: h.Lease.ID}); err != nil {
			t.Fatal(err)
		}
		res := <-got
		if res.Lease == nil {
			t.Fatalf("skew %v: poll answered %+v, want the lease", skew, res)
		}
		if res.Lease.TTL < 29*time.Second || res.Lease.TTL > 30*time.Second {
			t.Errorf("Redis clock %v off: handed-over lease ttl %v, want about 30s", skew, res.Lease.TTL)
		}
	}
}

// A client already gone when its request reaches the store creates nothing: no
// grant, no ticket.
func TestNothingForAClientGone(t *testing.T) {
	prefix := "gone" + time.Now().Format("150405.000000")
	s := newStore(t, store.Options{Prefix: prefix})
	rdb := shared.Client(t)
	bg := context.Background()
	h, err := s.Acquire(bg, store.AcquireRequest{Name: "busy", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	for _, r := range []store.AcquireRequest{
		{Name: "free", TTL: time.Minute},
		{Name: "free", TTL: time.Minute, Fair: true},
		{Name: "busy", TTL: time.Minute, Fair: true},
		{Name: "busy", TTL: time.Minute, Fair: true, Wait: time.Second},
		{Name: "busy", TTL: time.Minute, Wait: time.Second},
	} {
		if _, err := s.Acquire(ctx, r); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%+v: error %v, want ErrUnavailable (client gone)", r, err)
		}
	}
	keys := rdb.Keys(bg, prefix+":*").Val()
	for _, k := range keys {
		if k != s.LockKey("busy") {
			t.Errorf("key %s left by a client already gone", k)
		}
	}
	if st, err := s.State(bg, "busy"); err != nil || st.Holders != 1 || st.Waiters != 0 || st.Fence != h.Lease.Fence {
		t.Errorf("busy after clients already gone asked for it: %+v %v, want only the holder", st, err)
	}
}

// Close waits for the calls in flight and undoes what they may have granted:
// an acquire sent to a frozen Redis during shutdown leaves no hold once Redis
// resumes within the wait.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "cl"
	rdb, err := store.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := store.New(rdb, store.Options{Prefix: prefix, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "x", TTL: 10 * time.Minute})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the call reach the frozen Redis
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in flight")
	case <-time.After(time.Second):
	}
	// The call times out (twice: it is sent again once its deadline has
	// passed); Close still waits, for the undo of what it may have been
	// granted, until Redis answers.
	if err := <-done; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("acquire during the freeze: %v, want ErrUnavailable", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned before the timed-out acquire was undone")
	case <-time.After(200 * time.Millisecond):
	}
	srv.Thaw()
	<-closed
	other := newStoreOn(t, srv, store.Options{Prefix: prefix})
	if st, err := other.State(context.Background(), "x"); err != nil || st.Held {
		t.Fatalf("lock after Close: %+v %v: a hold nobody knows", st, err)
	}
}
