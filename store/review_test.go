package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// Hostile review of the store (review branch): each test fails on the code it
// was written against.

// Holds and tickets are bound to the principal that made them ('by'), and
// every script that acts on one must compare it: another principal gets the
// answer for an unknown one and changes nothing. Another principal polls p1's
// ticket, already granted and claimed by p1 (its lease has 60 s): the poll
// rightly answers ErrTicketGone, but the store takes that answer for an
// uncertain failure (uncertain() is true for every error that is not a Redis
// error reply) and queues an unpoll, and unpoll.lua compares no 'by': it cuts
// p1's lease to the ticket ttl and marks it unclaimed. p1 was told 60 s; the
// lock passes to someone else after 1 s.
func TestReviewForeignPollCutsLease(t *testing.T) {
	ctx := context.Background()
	m := metrics.New()
	s := newStore(t, store.Options{TicketTTL: time.Second, Metrics: m})
	h, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, By: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Fair: true, By: "p1"})
	if err != nil || q.Ticket == nil {
		t.Fatalf("enqueue: %+v %v", q, err)
	}
	if _, err := s.Release(ctx, store.Ref{Name: "x", ID: h.Lease.ID, By: "p1"}); err != nil {
		t.Fatal(err)
	}
	own, err := s.Poll(ctx, store.Ref{Name: "x", ID: q.Ticket.ID, By: "p1"}, 0)
	if err != nil || own.Lease == nil || own.Lease.TTL < 50*time.Second {
		t.Fatalf("p1's poll: %+v %v, want its lease with about 60s", own, err)
	}

	_, err = s.Poll(ctx, store.Ref{Name: "x", ID: q.Ticket.ID, By: "p2"}, 0)
	if !errors.Is(err, store.ErrTicketGone) {
		t.Fatalf("p2's poll of p1's ticket: %v, want ErrTicketGone", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.Undos.WithLabelValues("unclaimed"))+testutil.ToFloat64(m.Undos.WithLabelValues("gone")) == 0 &&
		time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the cleaner announces itself only in its metric
	}
	l, err := s.Lease(ctx, store.Ref{Name: "x", ID: own.Lease.ID, By: "p1"})
	if err != nil {
		t.Fatalf("p1's lease after p2's poll: %v", err)
	}
	if l.TTL < 50*time.Second {
		t.Errorf("p1's lease has %v left after another principal polled its ticket, want about 60s (p2 must change nothing)", l.TTL)
	}
}

// The handoff latency metric is "time from a lock being handed to a waiting
// request to that request holding the lease": a duration on one clock. For a
// grant answered straight from its message it is time.Since(g.at), the
// gateway's clock minus the grant time on Redis's clock: any skew between the
// two goes into the histogram (an hour here; the embedded store's clock is set
// an hour behind ours).
func TestReviewHandoffMetricMixesClocks(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	mr.SetTime(time.Now().Add(-time.Hour))
	rdb, err := store.NewClient("redis://" + mr.Addr())
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
