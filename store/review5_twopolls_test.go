package store

import (
	"context"
	"testing"
	"time"
)

// Two polls of one ticket in flight: an old one whose client has gone (a proxy
// answered it 504; the gateway has not noticed yet) with the later deadline,
// and the client's new one. The lock is handed to the ticket at its full ttl
// "for" the old poll (pc names only the poll with the latest deadline); the
// grant message answers the new poll straight away, so the client holds the
// lease for its ttl. Then the old poll's end is undone (its client is gone):
// unpoll finds only that poll in pc and turns the grant back into an unclaimed
// one, kept for the ticket ttl: the lock passes on while the client holds it.
func TestReview5AnotherPollsUndoDoesNotTakeBackADeliveredGrant(t *testing.T) {
	s, _, _ := review5Store(t, "r5tp")
	s.opt.TicketTTL = 500 * time.Millisecond
	ctx := context.Background()
	a, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, By: "p"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Fair: true, By: "p"})
	if err != nil || res.Ticket == nil {
		t.Fatalf("fair acquire: %+v %v", res, err)
	}
	ref := Ref{Name: "x", ID: res.Ticket.ID, By: "p"}
	// The old poll: in flight for 30 s more, as Redis knows it.
	old := ticketWait{name: "x", ticket: ref.ID, th: hashID(ref.ID), tlh: hashID(ticketLease(ref.ID)), by: "p",
		pid: newID()[:11], until: new(string), echo: new(bool)}
	if p, err := s.pollOnce(ctx, old, 30*time.Second); err != nil || p.Ticket == nil {
		t.Fatalf("old poll: %+v %v", p, err)
	}
	// The client's new poll, parked.
	got := make(chan PollResult, 1)
	go func() {
		p, err := s.Poll(ctx, ref, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	for end := time.Now().Add(5 * time.Second); s.LocalWaiters("x") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the new poll never parked")
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := s.Release(ctx, Ref{Name: "x", ID: a.Lease.ID, By: "p"}); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p.Lease == nil {
		t.Fatalf("the new poll: %+v, want the lease", p)
	}
	// The old poll's client is gone: the store undoes that poll.
	s.undoTicket(old, false)
	settleUndos(t, s)
	time.Sleep(s.opt.TicketTTL + 200*time.Millisecond)
	b, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, By: "q"})
	if err == nil && b.Lease != nil {
		t.Fatalf("two holders: the client was handed the lease for %v (fence %d), and %v later another got the lock (fence %d)",
			p.Lease.TTL, p.Lease.Fence, s.opt.TicketTTL, b.Lease.Fence)
	}
	if _, err := s.Renew(ctx, Ref{Name: "x", ID: p.Lease.ID, By: "p"}, 0); err != nil {
		t.Fatalf("the client's lease, told %v, cannot be renewed: %v", p.Lease.TTL, err)
	}
}
