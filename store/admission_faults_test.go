package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// faultySmallPoolStore is smallPoolStore on the shared Redis with a fault
// hook on its client: two connections, so one call in flight at a time.
func faultySmallPoolStore(t *testing.T, opt store.Options) (*store.Store, *faulthook.Hook, *metrics.Metrics) {
	t.Helper()
	rdb, err := store.NewClient(shared.URL() + "?pool_size=2&pool_timeout=1ms")
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
