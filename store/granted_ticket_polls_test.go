package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/store"
)

// GET .../tickets/{ticket} answers the lease once the ticket is granted, every
// time it is asked (a client whose answer was lost asks again). What Redis
// keeps for a lock must not grow with how often that is asked: the lock's
// key is read and written whole by every operation on the lock.
func TestPollingAGrantedTicketAgainAndAgainKeepsTheLockSmall(t *testing.T) {
	s := newStore(t, store.Options{})
	rdb := shared.Client(t)
	ctx := context.Background()
	h := mustAcquire(t, s, "H", "x")
	q, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true})
	if err != nil || q.Ticket == nil {
		t.Fatalf("A: %+v %v, want a ticket", q, err)
	}
	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: h.ID}); err != nil {
		t.Fatal(err)
	}
	poll := func() {
		t.Helper()
		p, err := s.Poll(as("A"), store.Ref{Name: "x", ID: q.Ticket.ID}, 0)
		if err != nil || p.Lease == nil {
			t.Fatalf("A's poll of its granted ticket: %+v %v, want the lease", p, err)
		}
	}
	poll()
	size := func() int64 {
		n, err := rdb.MemoryUsage(ctx, s.LockKey("x")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := size()
	const polls = 500
	for range polls {
		poll()
	}
	after := size()
	t.Logf("the lock's key: %d B after the first poll, %d B after %d more", before, after, polls)
	if after > before+256 {
		t.Fatalf("the lock's key grew from %d B to %d B with %d polls of a granted ticket: it grows with every poll",
			before, after, polls)
	}
}
