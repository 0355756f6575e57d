package main

import (
	"context"
	"errors"
	"fmt"
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
	hungUp   atomic.Int64 // given up by their client before the answer: in neither of the above
	refused  refusals     // 401s and 403s (auth.go)
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
		case errors.Is(err, client.ErrIdempotencyKeyUsed):
			return check.Used, true
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
	id    int
	cls   []*client.Client // its principal's, one per Baton process
	bases []string         // the Baton processes' base URLs, in the order of cls
	key   string           // its principal's key, for the hangers' own clients
	rec   *check.Recorder
	tal   *tally
	pick  func() int // which Baton process the next request goes to
	// then, if set, is called with each operation once recorded (callfaults.go).
	then func(check.Op)
}

// on returns a caller whose requests all go to Baton process i, for requests
// made from another goroutine than the worker's (pick uses its random source).
func (c caller) on(i int, count func()) caller {
	c.pick = func() int { count(); return i }
	return c
}

// finish fills in the return, the outcome and the detail of o, and records it.
// A request whose client hung up (h) before its answer came is tallied apart:
// the service was not asked to answer it. The runner still reads the answer
// (hanger), and records what it says.
func (c *caller) finish(o *check.Op, err error, h *hanger) {
	o.Return = time.Now()
	out, answered := classify(err)
	// A 202, and an answer the caller found outside the contract, are set by the caller.
	if err != nil || (o.Outcome != check.Queued && o.Outcome != check.Invalid) {
		o.Outcome = out
	}
	if err != nil {
		o.Detail = err.Error()
		c.tal.refused.note(err, true)
	}
	if h != nil {
		o.HungUp, o.HungAt = h.hungUp()
	}
	o.Lost = err != nil && !answered && !o.HungUp
	switch {
	case o.HungUp:
		c.tal.hungUp.Add(1)
	default:
		c.tal.requests.Add(1)
		if answered {
			c.tal.answered.Add(1)
		}
	}
	c.rec.Add(*o)
	if c.then != nil {
		c.then(*o)
	}
}

// leaseFields records a lease answer. An answer whose mode is not the one
// asked for (want: exclusive or shared) is outside the contract.
func leaseFields(o *check.Op, l *client.Lease, want bool) {
	o.Lease, o.Fence, o.Count, o.ExpiresAt, o.AcquiredAt = l.ID, l.Fence, l.Count, l.ExpiresAt, l.AcquiredAt
	o.Shared, o.Limit = l.Shared, l.Limit
	if l.Shared != want {
		o.Outcome = check.Invalid
		o.Detail = fmt.Sprintf("asked for shared=%v, answered shared=%v", want, l.Shared)
	}
}

func (c *caller) ctx(wait time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), wait+opSlack)
}

// start begins an operation on the next Baton process: its record and client,
// or, with hang set, a hanger of its own on that process.
func (c *caller) start(kind check.Kind, name string, hang func(*hanger)) (check.Op, *client.Client, *hanger) {
	i := c.pick()
	op := check.Op{Client: c.id, Lock: name, Kind: kind, Server: i}
	cl, h := c.cls[i], (*hanger)(nil)
	if hang != nil {
		h = newHanger(c.bases[i], c.key)
		cl = h.cl
		hang(h)
	}
	op.Call = time.Now()
	return op, cl, h
}

// acquire asks for a new lease; the result holds a lease or a ticket, or is nil.
func (c *caller) acquire(name string, o client.AcquireOptions) (*client.AcquireResult, check.Op) {
	return c.acquireHanging(name, o, nil)
}

// acquireHanging is acquire by a client that hangs up: hang is given the
// request's hanger as the request starts, to arrange the hang-up (nil: a client
// that does not).
func (c *caller) acquireHanging(name string, o client.AcquireOptions, hang func(*hanger)) (*client.AcquireResult, check.Op) {
	return c.acquireTry(name, o, hang, 1, time.Time{})
}

// acquireTry is try number try of an acquire; a try after the first (of one
// Idempotency-Key) names when the first was called (first).
func (c *caller) acquireTry(name string, o client.AcquireOptions, hang func(*hanger), try int,
	first time.Time) (*client.AcquireResult, check.Op) {
	op, cl, h := c.start(check.Acquire, name, hang)
	if h != nil {
		defer h.close()
	}
	op.TTL, op.Owner, op.Shared, op.Limit = o.TTL, o.Owner, o.Shared, o.Limit
	if o.IdempotencyKey != "" {
		op.IdemKey, op.Try = o.IdempotencyKey, try
		if try > 1 {
			op.TicketCall = first
		}
	}
	ctx, cancel := c.ctx(o.Wait)
	defer cancel()
	res, err := cl.Acquire(ctx, name, o)
	if err == nil {
		op.Replayed = res.Replayed
	}
	switch {
	case err == nil && res.Ticket != nil:
		op.Ticket, op.Outcome = res.Ticket.ID, check.Queued
	case err == nil:
		leaseFields(&op, res.Lease, o.Shared)
	}
	c.finish(&op, err, h)
	return res, op
}

// ticket is a fair waiter's ticket, as its polls need it.
type ticket struct {
	id     string
	owner  string    // the label of the acquire that queued it
	asked  time.Time // when that acquire was called
	shared bool      // it asked for a shared hold
}

// poll long-polls a ticket.
func (c *caller) poll(name string, t ticket, wait time.Duration) (*client.PollResult, check.Op) {
	return c.pollHanging(name, t, wait, nil)
}

// pollHanging is poll by a client that hangs up (see acquireHanging).
func (c *caller) pollHanging(name string, t ticket, wait time.Duration, hang func(*hanger)) (*client.PollResult, check.Op) {
	op, cl, h := c.start(check.Poll, name, hang)
	if h != nil {
		defer h.close()
	}
	op.Ticket, op.TicketCall, op.Owner = t.id, t.asked, t.owner
	ctx, cancel := c.ctx(wait)
	defer cancel()
	res, err := cl.Poll(ctx, name, t.id, wait)
	switch {
	case err == nil && res.Lease != nil:
		leaseFields(&op, res.Lease, t.shared)
	case err == nil && res.Ticket != nil:
		op.Outcome = check.Queued
	}
	c.finish(&op, err, h)
	return res, op
}

func (c *caller) cancel(name string, t ticket) {
	op, cl, _ := c.start(check.Cancel, name, nil)
	op.Ticket, op.Owner = t.id, t.owner
	ctx, cancel := c.ctx(0)
	defer cancel()
	c.finish(&op, cl.Cancel(ctx, name, t.id), nil)
}

// reenter adds a hold to a lease; a shared hold's re-entry says so (API.md:
// a re-entry must match the hold's mode).
func (c *caller) reenter(name, lease string, ttl time.Duration, shared bool) (*client.Lease, check.Op) {
	op, cl, _ := c.start(check.Reenter, name, nil)
	op.Lease, op.TTL = lease, ttl
	ctx, cancel := c.ctx(0)
	defer cancel()
	res, err := cl.Acquire(ctx, name, client.AcquireOptions{Lease: lease, TTL: ttl, Shared: shared})
	var l *client.Lease
	if err == nil {
		l = res.Lease
		leaseFields(&op, l, shared)
	}
	c.finish(&op, err, nil)
	return l, op
}

func (c *caller) renew(name, lease string, ttl time.Duration, shared bool) (*client.Lease, check.Op) {
	op, cl, _ := c.start(check.Renew, name, nil)
	op.Lease, op.TTL = lease, ttl
	ctx, cancel := c.ctx(0)
	defer cancel()
	l, err := cl.Renew(ctx, name, lease, ttl)
	if err == nil {
		leaseFields(&op, l, shared)
	}
	c.finish(&op, err, nil)
	return l, op
}

func (c *caller) get(name, lease string, shared bool) (*client.Lease, check.Op) {
	op, cl, _ := c.start(check.Get, name, nil)
	op.Lease = lease
	ctx, cancel := c.ctx(0)
	defer cancel()
	l, err := cl.Lease(ctx, name, lease)
	if err == nil {
		leaseFields(&op, l, shared)
	}
	c.finish(&op, err, nil)
	return l, op
}

func (c *caller) release(name, lease string, fence int64) (*client.Released, check.Op) {
	op, cl, _ := c.start(check.Release, name, nil)
	op.Lease = lease
	ctx, cancel := c.ctx(0)
	defer cancel()
	r, err := cl.Release(ctx, name, lease)
	if err == nil {
		op.Fence, op.Count, op.Released = fence, r.Count, r.Released
	}
	c.finish(&op, err, nil)
	return r, op
}

// watch long-polls the lock's state while it is held with fence; the answer
// is kept in the record's detail.
func (c *caller) watch(name string, fence int64, wait time.Duration) check.Op {
	op, cl, _ := c.start(check.Watch, name, nil)
	op.Fence, op.Wait = fence, wait
	ctx, cancel := c.ctx(wait)
	defer cancel()
	st, err := cl.Watch(ctx, name, wait, &fence)
	if err == nil {
		op.Detail = fmt.Sprintf("answered held=%v fence=%d", st.Held, st.Fence)
	}
	c.finish(&op, err, nil)
	return op
}
