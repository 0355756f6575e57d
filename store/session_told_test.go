package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
)

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
