package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// minRenewInterval keeps a lease with a tiny ttl from being renewed in a spin.
const minRenewInterval = 10 * time.Millisecond

// keepAlive renews a lease or a session, granted at granted with ttl left,
// until ctx is done (it returns nil) or the hold is lost (it returns why).
// renew makes one attempt and returns the new remaining time.
//
// Like Redisson's watchdog it renews at a third of the ttl. A renewal that
// fails for a passing reason (no answer, a 5xx, a 429) is tried again with
// backoff while the lease lasts, by the local clock from the moment the last
// successful renewal was sent (so a little before the server's deadline);
// if the lease runs out first, the hold is lost. Any other refusal (404: not
// held; 401, 403: the key may no longer renew it) loses it at once.
func keepAlive(ctx context.Context, granted time.Time, ttl time.Duration, renew func(context.Context) (time.Duration, error)) error {
	deadline := granted.Add(ttl)
	next := granted.Add(max(ttl/3, minRenewInterval))
	for {
		if !sleepCtx(ctx, time.Until(next)) {
			return nil
		}
		var b backoff
		for {
			start := time.Now()
			actx, cancel := context.WithDeadline(ctx, deadline)
			left, err := renew(actx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				deadline = start.Add(left)
				next = start.Add(max(left/3, minRenewInterval))
				break
			}
			if !passing(err) {
				return err
			}
			remaining := time.Until(deadline)
			if remaining <= 0 {
				return fmt.Errorf("the lease ran out while renewals failed: %w", err)
			}
			// Come back within the lease: at the latest halfway to its end.
			d := max(min(b.next(retryAfterOf(err)), remaining/2), minRenewInterval)
			if !sleepCtx(ctx, d) {
				return nil
			}
		}
	}
}

// passing reports whether a failed renewal may succeed if tried again: no
// answer (or none in time), an answer that is not Baton's, a 5xx, a 408 or a 429.
func passing(err error) bool {
	var p *Problem
	if errors.As(err, &p) {
		return p.Status >= 500 || p.Status == http.StatusTooManyRequests || p.Status == http.StatusRequestTimeout
	}
	return true
}

// lostError is the error of a hold or session that is lost.
type lostError struct {
	what  string // `lock "reports"`, `session`
	cause error
}

func (e *lostError) Error() string        { return e.what + " lost: " + e.cause.Error() }
func (e *lostError) Unwrap() error        { return e.cause }
func (e *lostError) Is(target error) bool { return target == ErrLost }
