package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
)

// PATCH /v1/sessions/{id} with a shorter ttl makes every hold in the session
// end sooner than its waiters were told. When such a hold runs out, the lock
// must still reach its next waiter at once, as after a lease's renewal to a
// shorter ttl.
func TestAWaiterIsWokenWhenASessionRenewedShorterRunsOut(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	sess, _, err := s.CreateSession(as("S"), store.SessionRequest{TTL: 20 * time.Second, Owner: "S"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Acquire(as("S"), store.AcquireRequest{Name: "x", Session: sess.ID, Owner: "S"}); err != nil || res.Lease == nil {
		t.Fatalf("S's hold in its session: %+v %v", res, err)
	}
	w := request(as("W"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: 30 * time.Second, Owner: "W"})
	for start := time.Now(); s.LocalWaiters("x") == 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > answerBound {
			t.Fatal("W never waited")
		}
	}
	if !h.WaitQuiet("x", 300*time.Millisecond, answerBound) { // W has looked at the lock since it waits
		t.Fatal("the store never stopped calling Redis about x")
	}
	got, err := s.RenewSession(as("S"), store.Ref{ID: sess.ID}, time.Second, nil)
	if err != nil || got.Locks != 1 {
		t.Fatalf("renewing the session to 1 s: %+v %v", got, err)
	}
	end := time.Now().Add(got.Remaining)
	// "At once" is 50 ms; a loaded machine gets far more. A lost wake-up is
	// answered only when the session's hold was due to end before the renewal.
	const bound = 5 * time.Second
	select {
	case a := <-w:
		if a.err != nil || a.res.Lease == nil {
			t.Fatalf("W: %+v %v, want the lease", a.res, a.err)
		}
		t.Logf("W granted %v after the session's hold ran out", time.Since(end).Round(time.Millisecond))
	case <-time.After(time.Until(end) + bound):
		t.Fatalf("W not granted %v after the session's hold (renewed from 20 s down to 1 s) ran out", bound)
	}
}

// GET /v1/sessions/{id} hands the session's owner the lease of every hold in
// it, to act on directly. A hold shown so has been told of: the store must
// never end it because the request that asked for it lost its answer.
func TestASessionsHoldShownToItsOwnerIsNeverUndone(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	sess, _, err := s.CreateSession(as("S"), store.SessionRequest{TTL: time.Minute, Owner: "S"})
	if err != nil {
		t.Fatal(err)
	}
	// A asks for x in the session; its call runs, and its reply is lost.
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.DropReply})
	ctxA, leave := context.WithCancel(as("A"))
	defer leave()
	a := request(ctxA, s, store.AcquireRequest{Name: "x", Session: sess.ID, Owner: "A"})
	caught(t, lost, "A's acquire")
	leave() // A's client goes away meanwhile

	// The session's owner looks at its session and is shown the hold.
	var shown *store.SessionHold
	for start := time.Now(); shown == nil; time.Sleep(10 * time.Millisecond) {
		got, err := s.GetSession(as("S"), store.Ref{ID: sess.ID})
		if err != nil {
			t.Fatal(err)
		}
		for i := range got.Holds {
			if got.Holds[i].Name == "x" {
				shown = &got.Holds[i]
			}
		}
		if time.Since(start) > answerBound {
			t.Fatal("the session never showed A's hold")
		}
	}
	t.Logf("the session shows a hold of x, fence %d", shown.Fence)
	notGranted(t, "A, gone,", a)
	for start := time.Now(); s.PendingUndos() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > answerBound {
			t.Fatal("the store never finished with A")
		}
	}

	if _, err := s.Lease(as("S"), store.Ref{Name: "x", ID: shown.Lease}); err != nil {
		t.Fatalf("the hold the session showed its owner (fence %d, the session's minute) was ended: %v", shown.Fence, err)
	}
	res, err := s.Acquire(as("C"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "C"})
	if res.Lease != nil {
		t.Fatalf("C was granted x (fence %d) while the session's owner holds the lease it was shown (fence %d)",
			res.Lease.Fence, shown.Fence)
	}
	if !errors.Is(err, store.ErrLockHeld) {
		t.Fatalf("C: %v, want the lock held", err)
	}
	if _, err := s.Release(as("S"), store.Ref{Name: "x", ID: shown.Lease}); err != nil {
		t.Fatalf("the session's owner releasing the hold it was shown: %v", err)
	}
}
