package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
)

// Requests with an Idempotency-Key whose outcome stayed unknown. Every
// request with one key lands on the same lease, so what the store does to end
// one request's hold nobody was told of must spare what another request with
// the key made or was told of, and must not keep the key from a fresh attempt.

// keyedRequest is A's acquire with the key k.
func keyedRequest() store.AcquireRequest {
	return store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k", BodyHash: "b"}
}

// A keyed acquire grants, and every reply to it is lost: the client is told
// it failed, and nobody was told of the hold. That hold ends, and the key is
// forgotten with it: the client's retry with the key is a fresh attempt,
// granted, never "key used".
func TestAKeyedHoldNobodyWasToldOfIsForgottenWithItsKey(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.DropReply})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every reply lost: answered %+v, want an error", res)
	}
	lost.Disarm()
	if lost.Count() == 0 {
		t.Fatal("no reply to A was lost")
	}
	freeWithin(t, s, "x", time.Now(), "A was told its keyed acquire failed")
	res, err := s.Acquire(as("A again"), keyedRequest())
	if err != nil || res.Lease == nil || res.Replayed {
		t.Fatalf("A's retry with its key once the hold nobody knew ended: %+v %v, want a fresh grant", res, err)
	}
}

// A keyed acquire grants and every reply to it is lost; what the store does
// to end that request is held up. B, a retry with the key, is answered that
// hold (replayed). Then the held-up work reaches Redis: it must leave the hold
// B was told of.
func TestUndoOfAKeyedRequestSparesTheHoldARetryWasToldOf(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.DropReply})
	later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every reply lost: answered %+v, want an error", res)
	}
	lost.Disarm()
	caught(t, later, "the store's own work about A")
	b, err := s.Acquire(as("B"), keyedRequest())
	if err != nil || b.Lease == nil || !b.Replayed {
		t.Fatalf("B, A's retry with its key: %+v %v, want A's hold, replayed", b, err)
	}
	delivered(t, "the store's own work about A", later.Deliver())
	stillHeldBy(t, s, "B", b.Lease)
}

// A keyed acquire's attempts are all held up in the network: the client is
// told it failed, and what the store does to end that request is held up too.
// B, a retry with the key, finds the lock free and is granted afresh, under
// the lease every request with the key lands on. Then the held-up work reaches
// Redis: it must end nothing B made, and the key must still name B's hold.
func TestUndoOfAKeyedRequestSparesAFreshHoldMadeWithItsKey(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.HoldBack})
	later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every attempt held up: answered %+v, want an error", res)
	}
	lost.Disarm()
	caught(t, later, "the store's own work about A")
	b, err := s.Acquire(as("B"), keyedRequest())
	if err != nil || b.Lease == nil || b.Replayed {
		t.Fatalf("B, A's retry with its key, the lock free: %+v %v, want a fresh grant", b, err)
	}
	delivered(t, "the store's own work about A", later.Deliver())
	d, err := s.Acquire(as("D"), keyedRequest())
	if err != nil || d.Lease == nil || !d.Replayed || d.Lease.ID != b.Lease.ID {
		t.Fatalf("D, another retry with the key: %+v %v, want B's hold, replayed", d, err)
	}
	stillHeldBy(t, s, "B", b.Lease)
}

// stillHeldBy fails unless who still holds l with most of its minute left, C
// cannot take the lock, and who's release succeeds.
func stillHeldBy(t *testing.T, s *store.Store, who string, l *store.Lease) {
	t.Helper()
	got, err := s.Lease(as(who), store.Ref{Name: l.Name, ID: l.ID})
	if err != nil {
		t.Fatalf("%s's lease (fence %d), never released: %v", who, l.Fence, err)
	}
	if got.TTL < 50*time.Second {
		t.Fatalf("%s's lease has %v left of its minute", who, got.TTL.Round(time.Millisecond))
	}
	if c, err := s.Acquire(as("C"), store.AcquireRequest{Name: l.Name, TTL: time.Minute, Owner: "C"}); !errors.Is(err, store.ErrLockHeld) {
		t.Fatalf("C, while %s holds: %+v %v, want the lock held", who, c, err)
	}
	if _, err := s.Release(as(who), store.Ref{Name: l.Name, ID: l.ID}); err != nil {
		t.Fatalf("%s's release: %v", who, err)
	}
}
