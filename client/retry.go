package client

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff between retries: doubling from backoffBase up to backoffCap, each
// wait drawn between half and all of it, so that clients that failed together
// do not come back together.
const (
	backoffBase = 100 * time.Millisecond
	backoffCap  = 2 * time.Second
)

// backoff yields the waits between retries of one operation.
type backoff struct{ n int }

// next is the wait before the next attempt: the exponential backoff, or the
// server's Retry-After when that is longer.
func (b *backoff) next(retryAfter time.Duration) time.Duration {
	d := backoffCap
	if b.n < 8 {
		d = min(backoffCap, backoffBase<<b.n)
	}
	b.n++
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

// retryAfterOf is the Retry-After of err's *Problem, or 0.
func retryAfterOf(err error) time.Duration {
	var p *Problem
	if errors.As(err, &p) {
		return p.RetryAfter
	}
	return 0
}

// sleepCtx waits d, or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// NewIdempotencyKey returns a fresh Idempotency-Key: 128 random bits,
// base64url. Lock and NewSession make one for every request they send.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
