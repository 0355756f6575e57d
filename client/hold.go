package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Hold is a lock held by Lock, kept alive in the background until Unlock or
// until it is lost. Its methods are safe for concurrent use.
type Hold struct {
	c     *Client
	name  string
	id    string // the lease id
	fence int64
	sess  *Session // the session it is in, when NewSession made it on c

	k     keeper // its life; k.mu guards lease too
	lease Lease
}

// keep starts keeping l, received at got: renewing it, or, in a session,
// leaving that to the session (sess) or watching it (a session of elsewhere).
func (c *Client) keep(name string, l *Lease, got time.Time, sessionID string, sess *Session) (*Hold, error) {
	h := &Hold{c: c, name: name, id: l.ID, fence: l.Fence, sess: sess, lease: *l,
		k: newKeeper(fmt.Sprintf("lock %q", name))}
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
	h.k.start(got, l.TTL, step, h.markLost)
	return h, nil
}

// renew renews the lease once.
func (h *Hold) renew(ctx context.Context) (time.Duration, error) {
	l, err := h.c.Renew(ctx, h.name, h.id, 0)
	if err != nil {
		return 0, err
	}
	_ = h.k.whileHeld(func() { h.lease = *l })
	return l.TTL, nil
}

// check looks at the lease once (a hold in a session renewed elsewhere).
func (h *Hold) check(ctx context.Context) (time.Duration, error) {
	l, err := h.c.Lease(ctx, h.name, h.id)
	if err != nil {
		return 0, err
	}
	_ = h.k.whileHeld(func() { h.lease = *l })
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
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	l := h.lease
	return &l
}

// Lost is closed when the hold is lost: a renewal answered that the lease is
// not held (it ran out, or was taken by force), renewals were refused, or they
// kept failing until the lease ran out. Stop using what the lock protects at
// once. Unlock does not close it.
func (h *Hold) Lost() <-chan struct{} { return h.k.lost }

// Err is nil while the hold is held or after Unlock, and once it is lost, an
// error matching ErrLost that wraps the cause (often ErrLeaseNotHeld).
func (h *Hold) Err() error { return h.k.failure() }

// Unlock stops the renewal, then releases the hold. A release whose answer is
// lost is retried (see WithRetryMaxTime). Errors: one matching ErrLost when the
// hold was lost before (so what it protected may have been touched by someone
// else meanwhile); ErrReleased on a second Unlock, or after the hold's session
// was closed; or the release's error (renewal has stopped anyway, so the lease
// then ends with its ttl).
func (h *Hold) Unlock(ctx context.Context) error {
	if err := h.k.beginRelease(); errors.Is(err, ErrLost) {
		return fmt.Errorf("unlock: %w", err)
	} else if err != nil {
		return fmt.Errorf("unlock %q: %w", h.name, err)
	}
	err := h.k.endRelease(h.c.release(ctx, h.name, h.id), ErrLeaseNotHeld)
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
	if h.k.markLost(cause) != nil && h.sess != nil {
		h.sess.forget(h)
	}
}

// markReleased marks a held hold released (its session was closed).
func (h *Hold) markReleased() { h.k.markReleased() }

// setExpiry records a session renewal on a hold in the session.
func (h *Hold) setExpiry(ttl time.Duration, at time.Time) {
	_ = h.k.whileHeld(func() { h.lease.TTL, h.lease.ExpiresAt = ttl, at })
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
