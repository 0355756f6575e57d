package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Grants to fair tickets whose polls' answers may not have reached their
// client. A grant kept for a ticket nobody has claimed passes on after the
// ticket ttl; one a client was answered (by a poll, a renewal) stays its
// lease, whatever a late poll of the same ticket, or its end, does.

// pollAnswer is what a poll was answered.
type pollAnswer struct {
	res store.PollResult
	err error
}

// pollAsync polls on its own goroutine; its answer comes on the channel.
func pollAsync(ctx context.Context, s *store.Store, ref store.Ref, wait time.Duration) <-chan pollAnswer {
	ch := make(chan pollAnswer, 1)
	go func() {
		res, err := s.Poll(ctx, ref, wait)
		ch <- pollAnswer{res, err}
	}()
	return ch
}

// polled waits for the answer of who's poll, for at most answerBound.
func polled(t *testing.T, who string, ch <-chan pollAnswer) pollAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(answerBound):
		t.Fatalf("%s not answered after %v", who, answerBound)
	}
	return pollAnswer{}
}

// queuedBehind queues A's fair ticket behind H's hold of x.
func queuedBehind(t *testing.T, s *store.Store) (hl *store.Lease, ticket store.Ref) {
	t.Helper()
	hl = mustAcquire(t, s, "H", "x")
	q, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true})
	if err != nil || q.Ticket == nil {
		t.Fatalf("A, fair, behind H: %+v %v, want a ticket", q, err)
	}
	return hl, store.Ref{Name: "x", ID: q.Ticket.ID}
}

// release releases who's lease l.
func release(t *testing.T, s *store.Store, who string, l *store.Lease) {
	t.Helper()
	if _, err := s.Release(as(who), store.Ref{Name: l.Name, ID: l.ID}); err != nil {
		t.Fatalf("%s's release: %v", who, err)
	}
}

// Two polls of one ticket are in flight: an old one whose client has gone
// (a proxy answered it 504) and the client's new one. The lock is handed to
// the ticket while both wait, and the new poll is answered the lease. What the
// store does to end the old poll reaches Redis only then: it must not take
// back the lease the new poll delivered (cut to the ticket ttl, the lock would
// pass to someone else while the client holds it).
func TestAnotherPollsUndoDoesNotTakeBackADeliveredGrant(t *testing.T) {
	s, h := faultyStore(t, store.Options{TicketTTL: 500 * time.Millisecond})
	hl, ref := queuedBehind(t, s)
	ctxOld, hangUp := context.WithCancel(as("A old"))
	defer hangUp()
	old := pollAsync(ctxOld, s, ref, 30*time.Second)
	awaitCond(t, "the old poll in flight", func() bool { return s.PollsInFlight(as("T"), "x", ref.ID) == 1 })
	fresh := pollAsync(as("A new"), s, ref, 10*time.Second)
	awaitCond(t, "both polls in flight", func() bool { return s.PollsInFlight(as("T"), "x", ref.ID) == 2 })

	later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	hangUp()
	if a := polled(t, "the old poll", old); a.res.Lease != nil {
		t.Fatalf("the old poll, its client gone: answered a lease")
	}
	caught(t, later, "the store's own work about the old poll")
	release(t, s, "H", hl)
	a := polled(t, "the new poll", fresh)
	if a.err != nil || a.res.Lease == nil {
		t.Fatalf("the new poll: %+v %v, want the lease", a.res, a.err)
	}
	delivered(t, "the store's own work about the old poll", later.Deliver())
	neverGrantedBeside(t, s, a.res.Lease)
}

// A poll claims a grant made to its ticket, and every reply to it is lost:
// its client is told it failed, and what the store does to end that poll is
// held up. The client polls again and is answered the lease (and renews it, or
// not). Then the held-up work reaches Redis: it must leave the lease its
// client was answered, at its full ttl.
func TestLateEndOfALostPollLeavesTheLeaseAnotherPollDelivered(t *testing.T) {
	for _, renewed := range []bool{false, true} {
		t.Run(map[bool]string{false: "claimed", true: "renewed"}[renewed], func(t *testing.T) {
			s, h := faultyStore(t, store.Options{TicketTTL: 2 * time.Second})
			hl, ref := queuedBehind(t, s)
			release(t, s, "H", hl) // the grant waits for the ticket's next poll

			lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A lost", Every: true, Action: faulthook.DropReply})
			later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
			if p, err := s.Poll(as("A lost"), ref, 0); err == nil {
				t.Fatalf("A's poll, every reply lost: answered %+v, want an error", p)
			}
			lost.Disarm()
			caught(t, later, "the store's own work about the lost poll")
			p, err := s.Poll(as("A"), ref, 0)
			if err != nil || p.Lease == nil {
				t.Fatalf("A's next poll: %+v %v, want the lease", p, err)
			}
			if renewed {
				if _, err := s.Renew(as("A"), store.Ref{Name: "x", ID: p.Lease.ID}, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			delivered(t, "the store's own work about the lost poll", later.Deliver())
			stillHeldBy(t, s, "A", p.Lease)
		})
	}
}

// grantedToAPoll hands x to A's ticket while A's poll waits, and returns the
// ticket and the lease that poll was answered.
func grantedToAPoll(t *testing.T, s *store.Store) (store.Ref, *store.Lease) {
	t.Helper()
	hl, ref := queuedBehind(t, s)
	p := pollAsync(as("A"), s, ref, 10*time.Second)
	awaitCond(t, "A's poll in flight", func() bool { return s.PollsInFlight(as("T"), "x", ref.ID) == 1 })
	release(t, s, "H", hl)
	a := polled(t, "A's poll", p)
	if a.err != nil || a.res.Lease == nil {
		t.Fatalf("A's poll: %+v %v, want the lease", a.res, a.err)
	}
	return ref, a.res.Lease
}

// The lock is handed to a ticket while its poll waits; nothing shows the
// answer reached the client (a gateway that died). The client cancels its
// ticket: the grant goes with it, and the lock is free at once, not held for
// the lease's ttl by nobody.
func TestCancelFreesAGrantNobodyConfirmed(t *testing.T) {
	s := newStore(t, store.Options{})
	ref, _ := grantedToAPoll(t, s)
	if err := s.Cancel(as("A"), ref); err != nil {
		t.Fatalf("A's cancel of its ticket, granted to a poll: %v, want the grant given up", err)
	}
	nothingLeft(t, s, "x", "A cancelled its only ticket")
}

// Once the client renewed the lease its ticket was granted, the lease is its
// own: cancelling the ticket then answers "gone" and leaves the lease.
func TestCancelLeavesARenewedLease(t *testing.T) {
	s := newStore(t, store.Options{})
	ref, l := grantedToAPoll(t, s)
	if _, err := s.Renew(as("A"), store.Ref{Name: "x", ID: l.ID}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(as("A"), ref); !errors.Is(err, store.ErrTicketGone) {
		t.Fatalf("A's cancel after renewing the lease: %v, want ErrTicketGone", err)
	}
	stillHeldBy(t, s, "A", l)
}

// A poll claims a grant made to its ticket (for the lease's full ttl), and
// every reply to it is lost: its client is told it failed. The grant goes
// back to waiting for the ticket's next poll, for at most the ticket ttl, and
// then passes on: C, waiting, gets the lock long before the lease's minute.
func TestUnclaimedGrantPassesOnAfterTheTicketTTLWhenItsPollWasLost(t *testing.T) {
	const ticketTTL = time.Second
	s, h := faultyStore(t, store.Options{TicketTTL: ticketTTL})
	hl, ref := queuedBehind(t, s)
	release(t, s, "H", hl)
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A lost", Every: true, Action: faulthook.DropReply})
	if p, err := s.Poll(as("A lost"), ref, 0); err == nil {
		t.Fatalf("A's poll, every reply lost: answered %+v, want an error", p)
	}
	lost.Disarm()
	start := time.Now()
	for st := stateOf(t, s, "x"); st.Held && st.TTL > ticketTTL; st = stateOf(t, s, "x") {
		if time.Since(start) > settleWindow {
			t.Fatalf("the grant the lost poll claimed is kept %v more, %v after its client was told the poll failed (the ticket ttl is %v)",
				st.TTL.Round(time.Millisecond), settleWindow, ticketTTL)
		}
		time.Sleep(20 * time.Millisecond) // the store's own work shows only in the lock's state
	}
	c, err := s.Acquire(as("C"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "C", Wait: 10 * time.Second})
	if err != nil || c.Lease == nil {
		t.Fatalf("C, waiting 10 s for a grant kept at most %v for its ticket: %+v %v, want the lock", ticketTTL, c, err)
	}
}

// Holds and tickets are bound to the principal that made them ('by'), and
// every script that acts on one must compare it: another principal gets the
// answer for an unknown one and changes nothing. Another principal polls p1's
// ticket, already granted and claimed by p1 (its lease has 60 s): the poll
// rightly answers ErrTicketGone, but the store takes that answer for an
// uncertain failure (uncertain() is true for every error that is not a Redis
// error reply) and queues an unpoll, and unpoll.lua compares no 'by': it cuts
// p1's lease to the ticket ttl and marks it unclaimed. p1 was told 60 s; the
// lock passes to someone else after 1 s.
func TestAnotherPrincipalsPollLeavesAClaimedLeaseAlone(t *testing.T) {
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
