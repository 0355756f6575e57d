package main

import (
	"context"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// Clients that hang up. A client that goes away in the middle of a
// request never sees its answer: whatever the request was granted is a hold
// nobody knows, and Baton must undo it (store/abandon.go). These clients hang up
// (hanger: a FIN on a connection of the request's own) at random moments of a
// request: a wait, fair or not; a request without a wait, within its own round
// trip; a ticket's poll; and the same right around a release of the lock they
// wait for. Their requests are recorded as hung up, with what Baton answered
// after the hang-up (a 503, mostly: an unknown outcome), and every hold found in
// Redis under their owner label is judged by check.Orphans.
//
// The random delays below are the point: they choose the moment a client hangs
// up, not a wait for an event.

// hangTTL is the lease a hanging-up client asks for: well above the ticket ttl,
// so that a hold left behind for a client that has gone (an orphan) outlives the
// ticket ttl by far and shows.
func (w *worker) hangTTL() time.Duration {
	return w.dur(3*w.cfg.ticketTTL, 6*w.cfg.ticketTTL)
}

// hangUp is one cycle of a client that gives up on a request.
func (w *worker) hangUp(ctx context.Context, name string) {
	ttl := w.hangTTL()
	switch r := w.rng.Float64(); {
	case r < 0.3:
		w.raceRelease(ctx, w.race[w.rng.IntN(len(w.race))], ttl)
	case r < 0.6: // a wait, fair or not, given up at a random moment of it
		o := client.AcquireOptions{TTL: ttl, Owner: w.label(), Fair: w.chance(0.5),
			Wait: w.dur(100*time.Millisecond, w.cfg.maxWait)}
		w.pickMode(name, &o)
		w.hangAcquire(ctx, name, o, w.dur(0, o.Wait))
	case r < 0.75: // no wait: given up within the request's own round trip
		o := client.AcquireOptions{TTL: ttl, Owner: w.label(), Fair: w.chance(0.5)}
		w.pickMode(name, &o)
		w.hangAcquire(ctx, name, o, w.dur(0, 3*time.Millisecond))
	default: // a ticket's poll given up at a random moment of its wait
		o := client.AcquireOptions{TTL: ttl, Owner: w.label(), Fair: true}
		w.pickMode(name, &o)
		res, op := w.acquire(name, o)
		if op.Outcome != check.Queued {
			w.leave(ctx, name, res, op)
			return
		}
		t := ticket{id: res.Ticket.ID, owner: o.Owner, asked: op.Call, shared: o.Shared}
		wait := w.dur(100*time.Millisecond, w.cfg.maxPoll)
		w.hangPoll(ctx, name, t, wait, w.dur(0, wait))
	}
}

// hangAcquire sends an acquire and hangs up after the given time.
func (w *worker) hangAcquire(ctx context.Context, name string, o client.AcquireOptions, after time.Duration) {
	var timer *time.Timer
	res, op := w.acquireHanging(name, o, func(h *hanger) { timer = time.AfterFunc(after, h.hangUp) })
	timer.Stop()
	w.leave(ctx, name, res, op)
}

// hangPoll polls a ticket and hangs up after the given time.
func (w *worker) hangPoll(ctx context.Context, name string, t ticket, wait, after time.Duration) {
	var timer *time.Timer
	res, op := w.pollHanging(name, t, wait, func(h *hanger) { timer = time.AfterFunc(after, h.hangUp) })
	timer.Stop()
	w.afterPoll(ctx, name, t, res, op)
}

// leave ends a hanging-up client's acquire: a lease it was answered with anyway
// (the answer came before the hang-up, or Baton answered the hung-up client with
// it) is released at once; a ticket is cancelled or left to run out.
func (w *worker) leave(ctx context.Context, name string, res *client.AcquireResult, op check.Op) {
	switch op.Outcome {
	case check.OK:
		w.releaseAll(name, res.Lease, res.Lease.Count)
	case check.Queued:
		if w.chance(0.5) {
			w.cancel(name, ticket{id: res.Ticket.ID, owner: op.Owner, asked: op.Call})
		}
	case check.Busy:
	default:
		if !op.HungUp {
			w.backoff()
		}
	}
}

// afterPoll ends a hanging-up client's poll. The grant a hung-up poll may have
// been made is kept for the ticket for at most the ticket ttl: half the clients
// come back for it (and release it at once), half never do.
func (w *worker) afterPoll(ctx context.Context, name string, t ticket, res *client.PollResult, op check.Op) {
	switch {
	case op.Outcome == check.OK:
		w.releaseAll(name, res.Lease, 1)
	case op.Outcome == check.Gone:
	case w.chance(0.5):
		w.claim(ctx, name, t)
	}
}

// claim polls a ticket until it is granted (and then releases at once), gone,
// or given up (cancelled).
func (w *worker) claim(ctx context.Context, name string, t ticket) {
	for range 5 {
		if ctx.Err() != nil {
			return
		}
		res, op := w.poll(name, t, w.dur(100*time.Millisecond, w.cfg.maxPoll))
		switch op.Outcome {
		case check.OK:
			w.releaseAll(name, res.Lease, 1)
			return
		case check.Queued:
		case check.Unknown:
			w.backoff()
		default:
			return
		}
	}
	w.cancel(name, t)
}

// raceRelease gives up on a wait right around the release of the lock waited
// for: the client takes the lock itself, starts a waiter for it (a non-fair or a
// fair acquire with a wait, or a poll of a ticket queued behind it), lets the
// waiter settle into its wait, then releases the lock and hangs the waiter up
// within 3 ms of each other, in either order. This is how the first
// defect was found: a grant made to a fair waiter at the moment it went. It
// runs on a lock of the races (worker.race), where the waiter is at the head of
// the queue, so that the release hands the lock to it.
func (w *worker) raceRelease(ctx context.Context, name string, ttl time.Duration) {
	own, op := w.acquire(name, client.AcquireOptions{TTL: w.dur(w.cfg.maxTTL, 2*w.cfg.maxTTL), Owner: w.label()})
	switch op.Outcome {
	case check.OK:
	case check.Busy:
		time.Sleep(w.dur(5*time.Millisecond, 40*time.Millisecond))
		return
	default:
		w.backoff()
		return
	}
	kind := w.rng.IntN(3) // 0 non-fair wait, 1 fair wait, 2 ticket poll
	o := client.AcquireOptions{TTL: ttl, Owner: w.label(), Fair: kind > 0, Wait: w.cfg.maxWait}
	var t ticket
	if kind == 2 {
		o.Wait = 0
		res, qop := w.acquire(name, o) // the lock is ours: this queues
		if qop.Outcome != check.Queued {
			w.leave(ctx, name, res, qop)
			w.releaseAll(name, own.Lease, 1)
			return
		}
		t = ticket{id: res.Ticket.ID, owner: o.Owner, asked: qop.Call}
	}
	waiter, releaser := w.elsewhere(), w.elsewhere()
	hangers := make(chan *hanger, 1)
	hang := func(h *hanger) { hangers <- h }
	type answer struct {
		acq  *client.AcquireResult
		poll *client.PollResult
		op   check.Op
	}
	got := make(chan answer, 1)
	go func() {
		if kind == 2 {
			res, op := waiter.pollHanging(name, t, w.cfg.maxPoll, hang)
			got <- answer{poll: res, op: op}
			return
		}
		res, op := waiter.acquireHanging(name, o, hang)
		got <- answer{acq: res, op: op}
	}()
	hangUp := (<-hangers).hangUp
	time.Sleep(w.dur(10*time.Millisecond, 60*time.Millisecond)) // the waiter settles into its wait
	released := make(chan check.Op, 1)
	release := func() {
		_, op := releaser.release(name, own.Lease.ID, own.Lease.Fence)
		released <- op
	}
	if skew := w.dur(0, 6*time.Millisecond) - 3*time.Millisecond; skew < 0 {
		go release()
		time.Sleep(-skew)
		hangUp()
	} else {
		hangUp()
		time.Sleep(skew)
		release()
	}
	a := <-got
	if rop := <-released; rop.Outcome != check.OK {
		w.releaseAll(name, own.Lease, 1)
	}
	if kind == 2 {
		w.afterPoll(ctx, name, t, a.poll, a.op)
		return
	}
	w.leave(ctx, name, a.acq, a.op)
}
