package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
)

// WaitForever, as LockOptions.Wait, waits for the lock for as long as the
// context lets it.
const WaitForever time.Duration = math.MaxInt64

// waitChunk is the longest wait Lock asks of the server in one request, below
// the server's default maximum (BATON_MAX_WAIT, 60 s) and the read timeouts of
// common proxies; a longer Wait is served by as many requests as it takes.
var waitChunk = 30 * time.Second

// LockOptions are how Lock takes a lock. The zero value takes an exclusive
// hold with the server's default ttl, at once or not at all.
type LockOptions struct {
	TTL    time.Duration // lease length, renewed at a third of it; 0: the server's default (30 s)
	Wait   time.Duration // how long to wait for the lock; 0: not at all; WaitForever: until ctx is done
	Fair   bool          // wait in the lock's FIFO queue (a ticket, polled until granted)
	Shared bool          // a shared hold: shared holds coexist, up to Limit
	Limit  int           // with Shared: the most shared holds at once; 0 for no limit
	Owner  string        // a label shown in the lock's state, at most 128 characters
	// Session is the id of a session to take the hold in (leave TTL 0): the hold
	// lasts as long as the session and is renewed with it. A session that
	// NewSession made on this Client also tells the hold when it is lost; a
	// session made elsewhere is only read from, by a look at the lease at a
	// third of its ttl.
	Session string
}

// Lock takes the lock name and keeps it: it returns a Hold that renews its
// lease in the background at a third of its ttl until Unlock, or until the
// hold is lost (Hold.Lost). ctx bounds the taking only; the renewal lives
// until Unlock.
//
// With o.Wait, Lock waits for the lock up to o.Wait (in requests of at most 30 s
// each); with o.Fair it waits in the lock's queue instead, polling its ticket,
// and deletes the ticket when it gives up (the wait ran out, or ctx is done).
// A request whose answer is lost is retried with the same Idempotency-Key (see
// Acquire), and a ticket poll cut by a proxy (502, 504, no answer) is made
// again, so trouble on the way never leaves a hold or a ticket behind. A
// refusal (401, 403, 400, 409) is returned at once.
//
// Errors: ErrLockHeld (a *Problem with the holder's Owner and TTL, or, when a
// fair wait ran out, a plain error), and the errors of Acquire and Poll, with
// ctx's error when it is done. Every error names the lock.
func (c *Client) Lock(ctx context.Context, name string, o LockOptions) (*Hold, error) {
	var sess *Session
	if o.Session != "" {
		sess = c.liveSession(o.Session)
	}
	return c.lock(ctx, name, o, sess)
}

func (c *Client) lock(ctx context.Context, name string, o LockOptions, sess *Session) (*Hold, error) {
	if o.Wait < 0 {
		return nil, fmt.Errorf("lock %q: %w: Wait %v is negative (0 does not wait, WaitForever waits until ctx is done)", name, ErrInvalid, o.Wait)
	}
	if sess != nil {
		if err := sess.usable(); err != nil {
			return nil, fmt.Errorf("lock %q: %w", name, err)
		}
	}
	var l *Lease
	var err error
	if o.Fair {
		l, err = c.obtainFair(ctx, name, o)
	} else {
		l, err = c.obtain(ctx, name, o)
	}
	if err != nil {
		return nil, err
	}
	return c.keep(name, l, time.Now(), o.Session, sess)
}

// acquireOptions are o's fields for Acquire, with no wait.
func (o LockOptions) acquireOptions() AcquireOptions {
	return AcquireOptions{TTL: o.TTL, Fair: o.Fair, Owner: o.Owner, Shared: o.Shared, Limit: o.Limit, Session: o.Session}
}

// waitLeft returns how long of o.Wait is left, measured from now.
func (o LockOptions) waitLeft() func() time.Duration {
	if o.Wait == WaitForever {
		return func() time.Duration { return WaitForever }
	}
	end := time.Now().Add(o.Wait)
	return func() time.Duration { return time.Until(end) }
}

// obtain takes the lock without the queue: one request, or one per waitChunk
// of a longer wait, each with an Idempotency-Key of its own (a request that got
// 423 made nothing), and each retried with its key when its answer is lost.
func (c *Client) obtain(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	left := o.waitLeft()
	ao := o.acquireOptions()
	for {
		ao.Wait = max(0, min(left(), waitChunk))
		ao.IdempotencyKey = NewIdempotencyKey()
		res, err := c.Acquire(ctx, name, ao)
		if err == nil {
			if res.Lease == nil {
				return nil, fmt.Errorf("acquire %q: %w: a ticket without fair", name, ErrUnexpectedResponse)
			}
			return res.Lease, nil
		}
		if !errors.Is(err, ErrLockHeld) || left() <= 0 {
			return nil, err
		}
	}
}

// obtainFair takes the lock through its queue: a request that answers at once
// with a lease or a ticket, then long-polls of the ticket until it is granted.
// The request does not wait itself, so that a proxy that cuts long requests
// only ever cuts a poll, which is simply made again.
func (c *Client) obtainFair(ctx context.Context, name string, o LockOptions) (*Lease, error) {
	left := o.waitLeft()
	ao := o.acquireOptions()
	ao.IdempotencyKey = NewIdempotencyKey()
	res, err := c.Acquire(ctx, name, ao)
	if err != nil {
		return nil, err
	}
	if res.Lease != nil {
		return res.Lease, nil
	}
	t := res.Ticket
	var b backoff
	for {
		wait := left()
		if wait <= 0 {
			c.leaveQueue(ctx, name, t.ID)
			return nil, fmt.Errorf("lock %q: %w: not granted within %v; left the fair queue at position %d",
				name, ErrLockHeld, o.Wait, t.Position)
		}
		pr, err := c.Poll(ctx, name, t.ID, min(wait, waitChunk))
		switch {
		case err == nil && pr.Lease != nil:
			return pr.Lease, nil
		case err == nil:
			t.Position = pr.Ticket.Position
			b = backoff{}
		case ctx.Err() != nil:
			c.leaveQueue(ctx, name, t.ID)
			return nil, err
		case errors.Is(err, ErrTicketGone):
			return nil, err
		case passing(err):
			// The poll was cut (a proxy's 502 or 504, no answer) or the server is
			// busy: poll again well within the ticket's life.
			d := min(b.next(retryAfterOf(err)), max(t.TicketTTL/3, minRenewInterval), max(0, wait))
			if !sleepCtx(ctx, d) {
				c.leaveQueue(ctx, name, t.ID)
				return nil, fmt.Errorf("poll ticket on %q: %w: %w", name, ctx.Err(), err)
			}
		default:
			c.leaveQueue(ctx, name, t.ID)
			return nil, err
		}
	}
}

// leaveQueue deletes a ticket Lock gives up on, so that the queue moves on at
// once; if that fails, the ticket still ends a ticket ttl after its last poll.
func (c *Client) leaveQueue(ctx context.Context, name, ticketID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(c.retryMax, 2*time.Second))
	defer cancel()
	_ = c.retry(ctx, func(bool) error {
		err := c.once(ctx, request{method: http.MethodDelete, target: subPath(name, "tickets", ticketID)})
		if errors.Is(err, ErrTicketGone) {
			return nil
		}
		return err
	})
}

// WithLock runs fn while holding the lock name (taken as Lock takes it), and
// releases it on every way out of fn, a panic included. fn's context is
// cancelled when the hold is lost (context.Cause says why, matching ErrLost)
// or when ctx is done. WithLock returns fn's error; when fn succeeded, the
// release's error, which matches ErrLost if the hold was lost meanwhile, so
// that a critical section that was not protected to its end never passes for
// a success.
func (c *Client) WithLock(ctx context.Context, name string, o LockOptions, fn func(ctx context.Context, h *Hold) error) (err error) {
	h, err := c.Lock(ctx, name, o)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-h.Lost():
			cancel(h.Err())
		case <-fctx.Done():
		}
	}()
	defer func() {
		cancel(nil)
		// The release must happen even when ctx is done; it is bounded by the
		// retry time.
		uctx, stop := context.WithTimeout(context.WithoutCancel(ctx), c.retryMax+10*time.Second)
		defer stop()
		if uerr := h.Unlock(uctx); err == nil {
			err = uerr
		}
	}()
	return fn(fctx, h)
}
