package store

import (
	"context"
	"testing"
	"time"
)

// An acquire whose first attempt ran in Redis (granted) and whose reply was
// lost; the retry reaches Redis after the call's "not after" (the clock
// estimate was off: the Redis clock stepped forward since the last sample) and
// answers 'expired'. The store takes that as a definite failure and undoes
// nothing: the first attempt's grant is a hold nobody knows, for its whole ttl.
func TestReview5ExpiredRetryAfterALostGrantIsUndone(t *testing.T) {
	s, h, _ := review5Store(t, "r5k")
	ctx := context.Background()
	// The estimate is off: calls' "not after" is 1 s after they are sent, not
	// callBudget.
	s.clock.offset.Add(-(callBudget - time.Second).Milliseconds())
	h.mu.Lock()
	h.lose, h.lostAfter = true, 1500*time.Millisecond
	h.mu.Unlock()
	h.arm(s.acquire.Hash())
	_, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute})
	if err == nil {
		t.Fatal("the acquire succeeded; want its retry expired")
	}
	settleUndos(t, s)
	noHoldNobodyKnows(t, s, "(lost reply) then "+err.Error())
}

// acquire.lua's fallback tombstone life (no "not after") is callBudget.
func TestReview5FallbackTombstoneIsCallBudget(t *testing.T) {
	if callBudget != 10*time.Second {
		t.Fatalf("callBudget is %v: change copies_until in lua/acquire.lua to match", callBudget)
	}
}
