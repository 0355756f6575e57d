package store_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// smallPoolStore is a store whose client has two connections, and whose pool
// gives up on a connection after 1 ms: a burst of calls that waited in
// go-redis's pool would fail there at once.
func smallPoolStore(t *testing.T, srv *redistest.Server, opt store.Options) (*store.Store, *metrics.Metrics) {
	t.Helper()
	rdb, err := redisconn.NewClient(srv.URL() + "?pool_size=2&pool_timeout=1ms")
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	opt.Metrics = m
	opt.Prefix = "ad" + strconv.FormatInt(prefixes.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	opt.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s := store.New(rdb, opt)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, m
}

// eventually waits, generously, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 60s", what)
		}
		time.Sleep(time.Millisecond) // polls a gauge: there is no event to wait on
	}
}

func TestABurstOfWaitsFarBeyondThePoolAllWait(t *testing.T) {
	s, m := smallPoolStore(t, shared, store.Options{})
	holder, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "burst", TTL: time.Minute, Owner: "holder"})
	if err != nil || holder.Lease == nil {
		t.Fatalf("holder: %+v %v", holder, err)
	}
	const n = 400 // two hundred times the pool
	answers := make(chan answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s.AcquireFunc(context.Background(), store.AcquireRequest{Name: "burst", TTL: time.Minute, Wait: time.Minute,
				Owner: "w" + strconv.Itoa(i)}, func(res store.AcquireResult, err error) { answers <- answer{res, err} })
		}()
	}
	close(start)
	wg.Wait() // every first try has an answer or a wait
	eventually(t, "all waiting", func() bool {
		return s.LocalWaiters("burst") == n || len(answers) > 0
	})
	if len(answers) > 0 {
		a := <-answers
		t.Fatalf("%d waits of %d ended during the burst; first: %+v %v", len(answers)+1, n, a.res, a.err)
	}
	if got := testutil.ToFloat64(m.Overloaded.WithLabelValues("queue_full")) + testutil.ToFloat64(m.Overloaded.WithLabelValues("queue_wait")); got != 0 {
		t.Fatalf("%v calls refused as overloaded within the default bounds", got)
	}

	// The release hands the lock to one of them.
	if _, err := s.Release(context.Background(), store.Ref{Name: "burst", ID: holder.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answers:
		if a.err != nil || a.res.Lease == nil {
			t.Fatalf("after the release: %+v %v, want a grant", a.res, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no waiter granted 30s after the release")
	}
	s.Shutdown() // the others are answered: still held
	for range n - 1 {
		a := <-answers
		if !errors.Is(a.err, store.ErrLockHeld) {
			t.Fatalf("a wait ended by the shutdown: %+v %v, want lock held", a.res, a.err)
		}
	}
}

// firstTurn makes one call on the store, in its own goroutine, that takes the
// only turn and keeps it while Redis is frozen; it returns once Redis is.
func firstTurn(t *testing.T, s *store.Store, srv *redistest.Server) <-chan answer {
	t.Helper()
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	return request(context.Background(), s, store.AcquireRequest{Name: "held-up", TTL: time.Minute})
}

func TestOverloadedOnlyOnceTheQueueIsFull(t *testing.T) {
	srv := redistest.Start(t)
	const bound = 5
	s, m := smallPoolStore(t, srv, store.Options{MaxQueuedCalls: bound})
	first := firstTurn(t, s, srv)
	queued := func() int { return int(testutil.ToFloat64(m.CallsQueued)) }
	var waiting []<-chan answer
	for i := range bound {
		// Each takes its place in the queue before the next comes.
		waiting = append(waiting, request(context.Background(), s, store.AcquireRequest{Name: "q" + strconv.Itoa(i), TTL: time.Minute}))
		eventually(t, strconv.Itoa(i+1)+" queued", func() bool { return queued() == i+1 })
	}
	for i := range 3 {
		res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "over" + strconv.Itoa(i), TTL: time.Minute})
		if !errors.Is(err, store.ErrOverloaded) || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("a call past a full queue: %+v %v, want overloaded", res, err)
		}
	}
	srv.Thaw()
	for i, ch := range append(waiting, first) {
		if a := <-ch; a.err != nil || a.res.Lease == nil {
			t.Fatalf("call %d, queued within the bound: %+v %v, want a grant", i, a.res, a.err)
		}
	}
}

func TestAQueuedCallWhileRedisAnswersNothingIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := smallPoolStore(t, srv, store.Options{MaxQueueWait: 100 * time.Millisecond})
	first := firstTurn(t, s, srv)
	_, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "late", TTL: time.Minute})
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrOverloaded) {
		t.Fatalf("a call that waited for a turn while Redis answered nothing: %v, want unavailable", err)
	}
	srv.Thaw()
	<-first
}

func TestALongPollsCallWaitsForItsTurnAsLongAsItWouldWait(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := smallPoolStore(t, srv, store.Options{MaxQueueWait: 100 * time.Millisecond})
	first := firstTurn(t, s, srv)
	ctx := store.WithPatience(context.Background(), time.Now().Add(time.Minute))
	polled := request(ctx, s, store.AcquireRequest{Name: "patient", TTL: time.Minute, Wait: time.Minute})
	time.Sleep(500 * time.Millisecond) // five times the queue's bound, with Redis frozen
	srv.Thaw()
	if a := <-polled; a.err != nil || a.res.Lease == nil {
		t.Fatalf("a long-poll queued past the queue's bound: %+v %v, want a grant", a.res, a.err)
	}
	<-first
}

func TestARequestKeptWhileCallsQueueStartsOnceTheyMoveOn(t *testing.T) {
	srv := redistest.Start(t)
	s, m := smallPoolStore(t, srv, store.Options{})
	first := firstTurn(t, s, srv)
	second := request(context.Background(), s, store.AcquireRequest{Name: "second", TTL: time.Minute})
	eventually(t, "a call queued", func() bool { return testutil.ToFloat64(m.CallsQueued) == 1 })

	// Every turn is taken and a call waits for it: the request is kept, and
	// InTurn returns without running it.
	started := make(chan struct{})
	done := make(chan answer, 1)
	s.InTurn(context.Background(), func(ctx context.Context) {
		close(started)
		s.AcquireFunc(ctx, store.AcquireRequest{Name: "kept", TTL: time.Minute}, func(res store.AcquireResult, err error) {
			done <- answer{res, err}
		})
	})
	select {
	case <-started:
		t.Fatal("InTurn ran the request while every turn was taken and a call waited")
	default:
	}
	srv.Thaw()
	for _, ch := range []<-chan answer{first, second, done} {
		if a := <-ch; a.err != nil || a.res.Lease == nil {
			t.Fatalf("%+v %v, want a grant", a.res, a.err)
		}
	}

	// With the queue empty and no call running, InTurn runs the request at
	// once. (The calls that answered may still be giving their turns back, and
	// a request kept meanwhile runs later on its own: ask until one runs at
	// once.)
	eventually(t, "InTurn to run a request at once once no call waits", func() bool {
		var ran atomic.Bool
		s.InTurn(context.Background(), func(context.Context) { ran.Store(true) })
		return ran.Load()
	})
}

func TestAShutdownEndsTheLongPollsWaitingForATurn(t *testing.T) {
	srv := redistest.Start(t)
	s, m := smallPoolStore(t, srv, store.Options{MaxQueueWait: 100 * time.Millisecond})
	first := firstTurn(t, s, srv)
	ctx := store.WithPatience(context.Background(), time.Now().Add(time.Minute))
	polled := request(ctx, s, store.AcquireRequest{Name: "patient", TTL: time.Minute, Wait: time.Minute})
	eventually(t, "the long-poll queued", func() bool { return testutil.ToFloat64(m.CallsQueued) == 1 })
	s.Shutdown()
	select {
	case a := <-polled:
		if !errors.Is(a.err, store.ErrUnavailable) {
			t.Fatalf("a long-poll waiting for a turn at shutdown: %+v %v, want unavailable", a.res, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a long-poll waiting for a turn was not answered 30s after the shutdown")
	}
	srv.Thaw()
	<-first
}

func TestListingsBesideABurstOfAcquiresAreNotOverloadedWithinTheBounds(t *testing.T) {
	s, m := smallPoolStore(t, shared, store.Options{})
	for i := range 50 {
		if _, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "held" + strconv.Itoa(i), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 200
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.List(context.Background(), store.ListRequest{Limit: 10})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "new" + strconv.Itoa(i), TTL: time.Minute})
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d listings and acquires failed, far within the queue's bounds; first: %v (overloaded: %v)",
			failed, 2*n, first, testutil.ToFloat64(m.Overloaded.WithLabelValues("pool_timeout")))
	}
}
