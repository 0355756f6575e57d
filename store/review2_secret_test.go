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

// Hostile review 2 of the store.

// Two replicas of one deployment (the same Redis, the same prefix) with
// different BATON_SECRETs (a rotation rolled out one replica at a time, a
// typo in one manifest): nothing compares them, and each derives its own ids
// for an Idempotency-Key. A client's retry that reaches the other replica
// finds the key's record but no hold under the id it derives, and is told
// ErrIdempotencyUsed (409: what the key made has ended) while the hold is
// held, for its whole ttl. The same happens with no BATON_SECRET when Redis
// loses P:secret (handlers' TestReview2IdemSecretDivergesAfterRedisRestart).
// Either the replicas must agree (a fingerprint of the secret kept in Redis
// and checked at start), or a retry must find the hold whatever the replica.
func TestReview2SecretDiffersBetweenReplicas(t *testing.T) {
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
