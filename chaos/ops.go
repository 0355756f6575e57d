package main

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// opSlack bounds a request beyond the wait it asks for: Baton's own Redis
// timeouts are 2s.
const opSlack = 4 * time.Second

// tally counts the workload's HTTP requests.
type tally struct {
	requests atomic.Int64
	answered atomic.Int64 // answered with a status below 500
}

// classify reads an operation's error: its outcome for the checker, and whether
// the server answered it without a 5xx.
func classify(err error) (check.Outcome, bool) {
	if err == nil {
		return check.OK, true
	}
	var p *client.Problem
	if errors.As(err, &p) {
		switch {
		case p.Status >= 500:
			return check.Unknown, false
		case p.Status == http.StatusNotFound:
			return check.NotHeld, true
		case p.Status == http.StatusLocked:
			return check.Busy, true
		case p.Status == http.StatusGone:
			return check.Gone, true
		case p.Status == http.StatusTooManyRequests:
			return check.Unknown, true
		}
		return check.Invalid, true
	}
	if errors.Is(err, client.ErrUnexpectedResponse) {
		return check.Invalid, true
	}
	return check.Unknown, false // transport error or timeout
}

// caller makes one worker's requests and records each as an operation.
type caller struct {
	id   int
	cls  []*client.Client
	rec  *check.Recorder
	tal  *tally
	pick func() int // which Baton process the next request goes to
}

// finish fills in the return, the outcome and the detail of o, and records it.
func (c *caller) finish(o *check.Op, err error) {
	o.Return = time.Now()
	out, answered := classify(err)
	o.Outcome = out
	if err != nil {
		o.Detail = err.Error()
	}
	c.tal.requests.Add(1)
	if answered {
		c.tal.answered.Add(1)
	}
	c.rec.Add(*o)
}

// queued records o as answered with a 202: a ticket, still waiting.
func (c *caller) queued(o *check.Op) {
	o.Return, o.Outcome = time.Now(), check.Queued
	c.tal.requests.Add(1)
	c.tal.answered.Add(1)
	c.rec.Add(*o)
}

func leaseFields(o *check.Op, l *client.Lease) {
	o.Lease, o.Fence, o.Count, o.ExpiresAt, o.AcquiredAt = l.ID, l.Fence, l.Count, l.ExpiresAt, l.AcquiredAt
}

func (c *caller) ctx(wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), wait+opSlack)
}

// acquire asks for a new lease; the result holds a lease or a ticket, or is nil.
func (c *caller) acquire(name string, o client.AcquireOptions) (*client.AcquireResult, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Acquire, TTL: o.TTL, Call: time.Now()}
	ctx, cancel := c.ctx(o.Wait)
	defer cancel()
	res, err := c.cls[c.pick()].Acquire(ctx, name, o)
	switch {
	case err == nil && res.Ticket != nil:
		op.Ticket = res.Ticket.ID
		c.queued(&op)
		return res, op
	case err == nil:
		leaseFields(&op, res.Lease)
	}
	c.finish(&op, err)
	return res, op
}

// poll long-polls a ticket asked for at ticketCall.
func (c *caller) poll(name, ticket string, ticketCall time.Time, wait time.Duration) (*client.PollResult, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Poll, Ticket: ticket, TicketCall: ticketCall, Call: time.Now()}
	ctx, cancel := c.ctx(wait)
	defer cancel()
	res, err := c.cls[c.pick()].Poll(ctx, name, ticket, wait)
	if err == nil && res.Lease != nil {
		leaseFields(&op, res.Lease)
	}
	if err == nil && res.Ticket != nil {
		c.queued(&op)
		return res, op
	}
	c.finish(&op, err)
	return res, op
}

func (c *caller) cancel(name, ticket string) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Cancel, Ticket: ticket, Call: time.Now()}
	ctx, cancel := c.ctx(0)
	defer cancel()
	c.finish(&op, c.cls[c.pick()].Cancel(ctx, name, ticket))
}

// reenter adds a hold to a lease.
func (c *caller) reenter(name, lease string, ttl time.Duration) (*client.Lease, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Reenter, Lease: lease, TTL: ttl, Call: time.Now()}
	ctx, cancel := c.ctx(0)
	defer cancel()
	res, err := c.cls[c.pick()].Acquire(ctx, name, client.AcquireOptions{Lease: lease, TTL: ttl})
	var l *client.Lease
	if err == nil {
		l = res.Lease
		leaseFields(&op, l)
	}
	c.finish(&op, err)
	return l, op
}

func (c *caller) renew(name, lease string, ttl time.Duration) (*client.Lease, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Renew, Lease: lease, TTL: ttl, Call: time.Now()}
	ctx, cancel := c.ctx(0)
	defer cancel()
	l, err := c.cls[c.pick()].Renew(ctx, name, lease, ttl)
	if err == nil {
		leaseFields(&op, l)
	}
	c.finish(&op, err)
	return l, op
}

func (c *caller) get(name, lease string) (*client.Lease, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Get, Lease: lease, Call: time.Now()}
	ctx, cancel := c.ctx(0)
	defer cancel()
	l, err := c.cls[c.pick()].Lease(ctx, name, lease)
	if err == nil {
		leaseFields(&op, l)
	}
	c.finish(&op, err)
	return l, op
}

func (c *caller) release(name, lease string, fence int64) (*client.Released, check.Op) {
	op := check.Op{Client: c.id, Lock: name, Kind: check.Release, Lease: lease, Call: time.Now()}
	ctx, cancel := c.ctx(0)
	defer cancel()
	r, err := c.cls[c.pick()].Release(ctx, name, lease)
	if err == nil {
		op.Fence, op.Count, op.Released = fence, r.Count, r.Released
	}
	c.finish(&op, err)
	return r, op
}
