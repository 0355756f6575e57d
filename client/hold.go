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

// Hold is a lock held by Lock, kept alive in the background until Unlock or
// until it is lost. Its methods are safe for concurrent use.
type Hold struct {
	c     *Client
	name  string
	id    string // the lease id
	fence int64
	sess  *Session // the session it is in, when NewSession made it on c

	mu    sync.Mutex
	lease Lease
	state holdState
	err   error         // why it was lost
	lost  chan struct{} // closed when lost
	stop  context.CancelFunc
	done  chan struct{} // closed when the keeper has returned; nil when there is none
}

// keep starts keeping l, received at got: renewing it, or, in a session,
// leaving that to the session (sess) or watching it (a session of elsewhere).
func (c *Client) keep(name string, l *Lease, got time.Time, sessionID string, sess *Session) (*Hold, error) {
	h := &Hold{c: c, name: name, id: l.ID, fence: l.Fence, sess: sess, lease: *l, lost: make(chan struct{})}
	if sess != nil {
		if err := sess.track(h); err != nil {
			h.markLost(err)
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
		return h, nil
	}
	step := h.renew
	if sessionID != "" {
		step = h.check
	}
	ctx, stop := context.WithCancel(context.Background())
	h.stop, h.done = stop, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := keepAlive(ctx, got, l.TTL, step); err != nil {
			h.markLost(err)
		}
	}()
	return h, nil
}

// renew renews the lease once.
func (h *Hold) renew(ctx context.Context) (time.Duration, error) {
	l, err := h.c.Renew(ctx, h.name, h.id, 0)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	if h.state == stateHeld {
		h.lease = *l
	}
	h.mu.Unlock()
	return l.TTL, nil
}

// check looks at the lease once (a hold in a session renewed elsewhere).
func (h *Hold) check(ctx context.Context) (time.Duration, error) {
	l, err := h.c.Lease(ctx, h.name, h.id)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	if h.state == stateHeld {
		h.lease = *l
	}
	h.mu.Unlock()
	return l.TTL, nil
}

// Name is the lock's name.
func (h *Hold) Name() string { return h.name }

// Fence is the hold's fencing token: pass it to whatever the lock protects and
// have that refuse a write with a lower fence than one it has seen.
func (h *Hold) Fence() int64 { return h.fence }

// Lease is a copy of the hold's lease as the server last described it (at the
// grant or the last renewal).
func (h *Hold) Lease() *Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lease
	return &l
}

// Lost is closed when the hold is lost: a renewal answered that the lease is
// not held (it ran out, or was taken by force), renewals were refused, or they
// kept failing until the lease ran out. Stop using what the lock protects at
// once. Unlock does not close it.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

// Err is nil while the hold is held or after Unlock, and once it is lost, an
// error matching ErrLost that wraps the cause (often ErrLeaseNotHeld).
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == stateLost {
		return h.err
	}
	return nil
}

// Unlock stops the renewal, then releases the hold. A release whose answer is
// lost is retried (see WithRetryMaxTime). Errors: one matching ErrLost when the
// hold was lost before (so what it protected may have been touched by someone
// else meanwhile); ErrReleased on a second Unlock, or after the hold's session
// was closed; or the release's error (renewal has stopped anyway, so the lease
// then ends with its ttl).
func (h *Hold) Unlock(ctx context.Context) error {
	h.mu.Lock()
	switch h.state {
	case stateLost:
		err := h.err
		h.mu.Unlock()
		return fmt.Errorf("unlock: %w", err)
	case stateReleasing, stateReleased:
		h.mu.Unlock()
		return fmt.Errorf("unlock %q: %w", h.name, ErrReleased)
	}
	h.state = stateReleasing
	h.mu.Unlock()
	if h.stop != nil {
		h.stop()
		<-h.done // no renewal is in flight, and none will come, once this returns
	}
	err := h.c.release(ctx, h.name, h.id)
	h.mu.Lock()
	if errors.Is(err, ErrLeaseNotHeld) {
		h.state, h.err = stateLost, &lostError{what: fmt.Sprintf("lock %q", h.name), cause: err}
		close(h.lost)
		err = h.err
	} else {
		h.state = stateReleased
	}
	h.mu.Unlock()
	if h.sess != nil {
		h.sess.forget(h)
	}
	if err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// markLost marks a held hold lost, and tells its session.
func (h *Hold) markLost(cause error) {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	h.state, h.err = stateLost, &lostError{what: fmt.Sprintf("lock %q", h.name), cause: cause}
	close(h.lost)
	h.mu.Unlock()
	if h.sess != nil {
		h.sess.forget(h)
	}
}

// markReleased marks a held hold released (its session was closed).
func (h *Hold) markReleased() {
	h.mu.Lock()
	if h.state == stateHeld {
		h.state = stateReleased
	}
	h.mu.Unlock()
}

// setExpiry records a session renewal on a hold in the session.
func (h *Hold) setExpiry(ttl time.Duration, at time.Time) {
	h.mu.Lock()
	if h.state == stateHeld {
		h.lease.TTL, h.lease.ExpiresAt = ttl, at
	}
	h.mu.Unlock()
}

// release releases one hold, retrying a lost answer; a "not held" after a lost
// answer means the lost one did it.
func (c *Client) release(ctx context.Context, name, leaseID string) error {
	err := c.retry(ctx, func(again bool) error {
		err := c.once(ctx, request{method: http.MethodDelete, target: subPath(name, "leases", leaseID)})
		if again && errors.Is(err, ErrLeaseNotHeld) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease on %q: %w", name, err)
	}
	return nil
}
