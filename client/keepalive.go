package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// holdState is where a Hold or a Session is in its life.
type holdState int

const (
	stateHeld      holdState = iota
	stateReleasing           // Unlock (Close) has begun
	stateReleased            // Unlock (Close) is done, or it failed after renewal stopped
	stateLost                // lost: see err
)

// keeper is the life that a Hold and a Session share: held, being released,
// released, or lost (with why, and a channel closed at that moment), and the
// goroutine that keeps it alive meanwhile. Its mutex also guards the fields
// its owner says it does, so that they change together with the state.
type keeper struct {
	what string // what a lostError names: `lock "reports"`, `session`

	mu    sync.Mutex
	state holdState
	err   error         // why it was lost
	lost  chan struct{} // closed when lost
	stop  context.CancelFunc
	done  chan struct{} // closed when the goroutine has returned; nil when there is none
}

func newKeeper(what string) keeper {
	return keeper{what: what, lost: make(chan struct{})}
}

// start keeps the hold alive with renew (see keepAlive) in a goroutine, and
// calls lost with the reason if it is lost. Call it once, before anyone may
// release the hold.
func (k *keeper) start(granted time.Time, ttl time.Duration, renew func(context.Context) (time.Duration, error), lost func(error)) {
	ctx, stop := context.WithCancel(context.Background())
	k.stop, k.done = stop, make(chan struct{})
	go func() {
		defer close(k.done)
		if err := keepAlive(ctx, granted, ttl, renew); err != nil {
			lost(err)
		}
	}()
}

// whileHeld runs f (if not nil) under the mutex when the hold is held, and
// returns nil; otherwise it returns why it is not: the loss, or ErrReleased.
func (k *keeper) whileHeld(f func()) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch k.state {
	case stateHeld:
		if f != nil {
			f()
		}
		return nil
	case stateLost:
		return k.err
	}
	return ErrReleased
}

// failure is the loss, or nil while it is not lost.
func (k *keeper) failure() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state == stateLost {
		return k.err
	}
	return nil
}

// beginRelease moves a held hold to releasing and stops the goroutine: no
// renewal is in flight, and none will come, once it returns nil. Otherwise it
// returns the loss (matching ErrLost), or ErrReleased when a release has begun
// already.
func (k *keeper) beginRelease() error {
	k.mu.Lock()
	switch k.state {
	case stateLost:
		err := k.err
		k.mu.Unlock()
		return err
	case stateReleasing, stateReleased:
		k.mu.Unlock()
		return ErrReleased
	}
	k.state = stateReleasing
	k.mu.Unlock()
	if k.stop != nil {
		k.stop()
		<-k.done
	}
	return nil
}

// endRelease ends a release that answered err: an error matching gone means
// it was lost before (it returns that loss); any other leaves it released.
func (k *keeper) endRelease(err, gone error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if errors.Is(err, gone) {
		k.state, k.err = stateLost, &lostError{what: k.what, cause: err}
		close(k.lost)
		return k.err
	}
	k.state = stateReleased
	return err
}

// markLost marks a held hold lost and returns the loss, or nil when it was
// not held (released, or lost already).
func (k *keeper) markLost(cause error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.state != stateHeld {
		return nil
	}
	k.state, k.err = stateLost, &lostError{what: k.what, cause: cause}
	close(k.lost)
	return k.err
}

// markReleased marks a held hold released (its session was closed).
func (k *keeper) markReleased() {
	k.mu.Lock()
	if k.state == stateHeld {
		k.state = stateReleased
	}
	k.mu.Unlock()
}

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
