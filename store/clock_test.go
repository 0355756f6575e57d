package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
	"github.com/rs/zerolog"
)

// The store decides what a call with an unknown outcome made once the call's
// "not after" has passed, reckoned on its estimate of the Redis clock. That
// clock may step back (NTP, a failover to a host whose clock is behind), and
// this process's own clock may step forward, between the store's readings of
// it. A late copy must still be dead when the store decides: here Redis's
// clock steps back by 10 s just before A's call, whose first attempt is held
// up in the network; once A is answered (the lock is held: the store may take
// the 10 s to be sure), H releases and A's first attempt reaches Redis.
// Nobody was told of a hold: none may outlive the settle window.
func TestALateCopyIsDeadWhenTheStoreDecidesEvenIfTheRedisClockSteppedBack(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")

	s.StepRedisClock(-10 * time.Second)
	first := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.HoldBack})
	a := request(as("A"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A"})
	caught(t, first, "A's first attempt")
	select {
	case ans := <-a:
		if ans.res.Lease != nil {
			t.Fatalf("A was given a lease (fence %d) while H holds the lock", ans.res.Lease.Fence)
		}
		t.Logf("A answered %+v, %v", ans.res, ans.err)
	case <-time.After(3 * answerBound):
		t.Fatalf("A not answered after %v", 3*answerBound)
	}

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	delivered(t, "A's first attempt", first.Deliver())
	freeWithin(t, s, "x", since, "after A's late first attempt")
}

// The handoff latency metric is "time from a lock being handed to a waiting
// request to that request holding the lease": a duration on one clock. For a
// grant answered straight from its message it is time.Since(g.at), the
// gateway's clock minus the grant time on Redis's clock: any skew between the
// two goes into the histogram (an hour here; the embedded store's clock is set
// an hour behind ours).
func TestHandoffLatencyIsMeasuredOnOneClock(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	mr.SetTime(time.Now().Add(-time.Hour))
	rdb, err := redisconn.NewClient("redis://" + mr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := store.New(rdb, store.Options{Prefix: "k", Metrics: m, Logger: zerolog.New(zerolog.NewTestWriter(t))})
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
	deadline := time.Now().Add(5 * time.Second)
	for s.PollsInFlight(ctx, "x", q.Ticket.ID) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the poll never reached Redis")
		}
		time.Sleep(time.Millisecond) // the poll announces itself only in Redis
	}
	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: "x", ID: h.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	if res := <-got; res.Lease == nil {
		t.Fatalf("poll answered %+v, want the lease", res)
	}
	took := time.Since(released)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "baton_handoff_latency_seconds" {
			continue
		}
		hist := f.GetMetric()[0].GetHistogram()
		if sum := hist.GetSampleSum(); sum > took.Seconds()+1 {
			t.Errorf("baton_handoff_latency_seconds sum %.0fs over %d handoffs that took at most %v: the gateway's clock compared with Redis's",
				sum, hist.GetSampleCount(), took.Round(time.Millisecond))
		}
	}
}

// A ticket handed the lock while its waiter polls is answered straight from the
// grant message; its ttl must come from the grant (Redis's clock is the
// authority), not from comparing the grant time on Redis's clock with this
// process's clock. The embedded store's clock is set an hour behind ours.
func TestHandoffTTLFromRedisClock(t *testing.T) {
	ctx := context.Background()
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		m := miniredis.RunT(t)
		m.SetTime(time.Now().Add(skew))
		rdb, err := redisconn.NewClient("redis://" + m.Addr())
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
