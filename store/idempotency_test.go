package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/store"
)

// A fair request with an Idempotency-Key whose client hangs up while it waits
// in the queue leaves its ticket queued: its client can learn it again with
// its key. Its key must stay remembered while that ticket (or the hold it
// becomes) lives: a retry with the key is a replay of it, a retry with the key
// and another body is refused, and a retry never queues a second ticket behind
// the first one's grant.

// queuedKeyedAndLeft has H hold name and a fair request with key k queue
// behind H and hang up; it returns once the store is done with what the
// hang-up left it to do, with H's lease and the request.
func queuedKeyedAndLeft(t *testing.T, s *store.Store, name, k string) (*store.Lease, store.AcquireRequest) {
	t.Helper()
	h := mustAcquire(t, s, "H", name)
	req := store.AcquireRequest{Name: name, TTL: time.Minute, Owner: "A", Fair: true, Wait: 30 * time.Second,
		IdemKey: k, BodyHash: "body-" + k}
	ctxA, hangUp := context.WithCancel(as("A"))
	defer hangUp()
	a := request(ctxA, s, req)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		st, err := s.State(as("T"), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == 1 {
			break
		}
		if time.Since(start) > answerBound {
			t.Fatal("A never queued")
		}
	}
	hangUp()
	if ans := answered(t, "A, hung up,", a); ans.err == nil {
		t.Fatalf("A, hung up, answered %+v", ans.res)
	}
	for start := time.Now(); s.PendingUndos() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > answerBound {
			t.Fatal("the store never finished with A")
		}
	}
	st, err := s.State(as("T"), name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiters != 1 {
		t.Fatalf("A's ticket is not queued any more (%d waiters): nothing left to replay", st.Waiters)
	}
	return h, req
}

func TestRetryOfAKeyedFairRequestWhoseClientLeftReplaysItsQueuedTicket(t *testing.T) {
	s := newStore(t, store.Options{})
	_, req := queuedKeyedAndLeft(t, s, "x", "k1")

	retry := req
	retry.Wait = 0
	res, err := s.Acquire(as("B"), retry)
	if err != nil || res.Ticket == nil {
		t.Fatalf("B, A's retry with its key: %+v %v, want A's ticket", res, err)
	}
	if !res.Replayed {
		t.Errorf("B, A's retry with its key while A's ticket is queued, was answered that ticket as a fresh request " +
			"(not Idempotent-Replayed): the key was forgotten while what it made lives")
	}
	other := retry
	other.BodyHash = "another body"
	res, err = s.Acquire(as("C"), other)
	if !errors.Is(err, store.ErrIdempotencyMismatch) {
		t.Errorf("C, A's key with another body while A's ticket is queued: %+v %v, want ErrIdempotencyMismatch", res, err)
	}
}

func TestRetryOfAKeyedFairRequestWhoseClientLeftIsHandedItsTicketsGrant(t *testing.T) {
	s := newStore(t, store.Options{})
	h, req := queuedKeyedAndLeft(t, s, "x", "k2")

	// H releases: A's ticket is granted, and the grant waits for its claim.
	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: h.ID}); err != nil {
		t.Fatal(err)
	}
	retry := req
	retry.Wait = 0
	res, err := s.Acquire(as("B"), retry)
	if err != nil {
		t.Fatalf("B, A's retry with its key: %v", err)
	}
	st, serr := s.State(as("T"), "x")
	if serr != nil {
		t.Fatal(serr)
	}
	if res.Lease == nil {
		t.Fatalf("B, A's retry with its key once A's ticket was granted, was answered %+v (ticket %+v), not the lease: "+
			"a second ticket of the same key is queued behind the first one's grant (%d waiters)", res, res.Ticket, st.Waiters)
	}
	if st.Waiters != 0 {
		t.Fatalf("after B was handed the lease, %d waiters are queued: want none", st.Waiters)
	}
	if _, err := s.Release(as("B"), store.Ref{Name: "x", ID: res.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	if st, err = s.State(as("T"), "x"); err != nil {
		t.Fatal(err)
	}
	if st.Held || st.Waiters != 0 {
		t.Fatalf("after B released the lease, the lock is %+v: want it free", st)
	}
}

// Two replicas of one deployment (the same Redis, the same prefix) with
// different BATON_SECRETs (a rotation rolled out one replica at a time, a
// typo in one manifest) derive different ids for one Idempotency-Key. A
// client's retry that reaches the other replica must not be told
// ErrIdempotencyUsed (409: what the key made has ended) while the hold is
// held: either that replica finds the first lease, or it refuses with
// ErrSecretMismatch and says so in its readiness. (The handlers' tests cover
// the same after Redis loses its stored secret.)
func TestRetryOnAReplicaWithAnotherSecretFindsTheHoldOrRefuses(t *testing.T) {
	ctx := context.Background()
	prefix := "r2s" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	a := newStore(t, store.Options{Prefix: prefix, Secret: []byte(strings.Repeat("a", 32))})
	b := newStore(t, store.Options{Prefix: prefix, Secret: []byte(strings.Repeat("b", 32))})
	r := store.AcquireRequest{Name: "sec", TTL: time.Minute, By: "p", IdemKey: "k-1", BodyHash: "h"}
	first, err := a.Acquire(ctx, r)
	if err != nil || first.Lease == nil {
		t.Fatalf("first request: %+v %v", first, err)
	}
	retry, err := b.Acquire(ctx, r)
	switch {
	case errors.Is(err, store.ErrSecretMismatch):
		// The replicas do not agree, and b says so rather than deriving other ids.
		if rerr := b.Ready(ctx); !errors.Is(rerr, store.ErrSecretMismatch) {
			t.Errorf("b's readiness with a secret other than a's: %v, want ErrSecretMismatch", rerr)
		}
	case errors.Is(err, store.ErrIdempotencyUsed):
		t.Errorf("retry on the other replica, while the key's hold is held: ErrIdempotencyUsed (409 \"has ended\")")
	case err != nil:
		t.Errorf("retry on the other replica: %v", err)
	case retry.Lease == nil || retry.Lease.ID != first.Lease.ID:
		t.Errorf("retry on the other replica: %+v, want the first lease", retry)
	}
}
