package store_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// faultySmallPoolStore is smallPoolStore on the shared Redis with a fault
// hook on its client: two connections, so one call in flight at a time.
func faultySmallPoolStore(t *testing.T, opt store.Options) (*store.Store, *faulthook.Hook, *metrics.Metrics) {
	t.Helper()
	rdb, err := redisconn.NewClient(shared.URL() + "?pool_size=2&pool_timeout=1ms")
	if err != nil {
		t.Fatal(err)
	}
	h := faulthook.Install(rdb)
	m := metrics.New()
	opt.Metrics = m
	opt.Prefix = "af" + strconv.FormatInt(prefixes.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	opt.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s := store.New(rdb, opt)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	t.Cleanup(h.Close) // runs first: the store closes on a client without faults
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, h, m
}

func TestACallThatMayHaveRunIsNotAnsweredOverloaded(t *testing.T) {
	s, h, m := faultySmallPoolStore(t, store.Options{MaxQueuedCalls: 1})
	h.SetReadTimeout(time.Minute) // a stalled call keeps its turn for the whole stall
	lost := h.Arm(faulthook.Rule{Lock: "lost", Action: faulthook.DropReply})
	slow := h.Arm(faulthook.Rule{Lock: "slow", Action: faulthook.Stall, Delay: 8 * time.Second})

	// A's acquire runs, and its reply is lost: its outcome is unknown until
	// its deadline, when it is sent again.
	a := request(context.Background(), s, store.AcquireRequest{Name: "lost", TTL: time.Minute})
	caught(t, lost, "A's acquire")
	// Meanwhile the only turn is taken and the queue is full.
	slowDone := request(context.Background(), s, store.AcquireRequest{Name: "slow", TTL: time.Minute})
	caught(t, slow, "the slow acquire")
	queuedDone := request(context.Background(), s, store.AcquireRequest{Name: "queued", TTL: time.Minute})
	eventually(t, "a call queued", func() bool { return testutil.ToFloat64(m.CallsQueued) == 1 })

	got := answered(t, "A", a)
	if errors.Is(got.err, store.ErrOverloaded) {
		t.Fatalf("an acquire that ran (its reply lost) was answered %v: overloaded says nothing was done", got.err)
	}
	t.Logf("A answered %+v, %v", got.res, got.err)
	<-slowDone
	<-queuedDone
}

func TestACallWhoseContextDeadlinePassesInTheQueueWhileRedisAnswersIsOverloaded(t *testing.T) {
	s, h, m := faultySmallPoolStore(t, store.Options{})
	h.SetReadTimeout(time.Minute)
	// Every call on "slow" keeps the only turn for 700 ms, then is answered.
	h.Arm(faulthook.Rule{Lock: "slow", Action: faulthook.Stall, Every: true, Delay: 700 * time.Millisecond})
	var slow []<-chan answer
	for i := range 4 {
		slow = append(slow, request(context.Background(), s, store.AcquireRequest{Name: "slow", TTL: time.Minute, Owner: strconv.Itoa(i)}))
		eventually(t, "the slow calls in", func() bool { return testutil.ToFloat64(m.CallsQueued) >= float64(i) })
	}
	// Behind three slow calls: Redis answers one (at 700 ms) before this
	// call's own deadline (1 s) passes in the queue.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := s.Acquire(ctx, store.AcquireRequest{Name: "late", TTL: time.Minute})
	if !errors.Is(err, store.ErrOverloaded) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a call whose deadline passed in the queue while Redis answered others: %v, want overloaded", err)
	}
	for _, ch := range slow {
		<-ch
	}
}

func TestAnUndoIsNotStarvedByAQueueLongerThanTwoSeconds(t *testing.T) {
	s, h, _ := faultySmallPoolStore(t, store.Options{})
	h.SetReadTimeout(time.Minute)
	// Four clients keep calls on "busy" queued, each keeping the only turn
	// for 900 ms: a call waits about three of them for its turn.
	h.Arm(faulthook.Rule{Lock: "busy", Action: faulthook.Stall, Every: true, Delay: 900 * time.Millisecond})
	stop := make(chan struct{})
	var feeders sync.WaitGroup
	for i := range 4 {
		feeders.Add(1)
		go func() {
			defer feeders.Done()
			ctx := store.WithPatience(context.Background(), time.Now().Add(time.Minute))
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.Acquire(ctx, store.AcquireRequest{Name: "busy", TTL: time.Minute, Owner: strconv.Itoa(i)})
			}
		}()
	}
	defer func() { close(stop); feeders.Wait() }()

	// A's acquire runs and its reply is lost; A hangs up meanwhile, so the
	// hold it made is undone, by a call that waits in that queue.
	lost := h.Arm(faulthook.Rule{Lock: "lost", Action: faulthook.DropReply})
	ctx, hangUp := context.WithCancel(context.Background())
	a := request(ctx, s, store.AcquireRequest{Name: "lost", TTL: time.Hour, Owner: "A"})
	caught(t, lost, "A's acquire")
	hangUp()
	<-a

	// B waits for the lock: the undo frees it well within B's wait.
	bctx := store.WithPatience(context.Background(), time.Now().Add(time.Minute))
	res, err := s.Acquire(bctx, store.AcquireRequest{Name: "lost", TTL: time.Minute, Owner: "B", Wait: 40 * time.Second})
	if err != nil || res.Lease == nil {
		t.Fatalf("B, waiting for a hold whose client hung up before it heard of it: %+v %v, want a grant", res, err)
	}
}
