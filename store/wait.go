package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every wait below is an eventWait (events.go): its loop of "wait for an event,
// then look at Redis" is a step function run once per batch of events, and its
// answer goes to a callback, so that no goroutine is held while it waits. The
// steps keep the order and the choices of a select loop: a client gone first,
// then the shutdown, then the deadline, then the dispatcher's wake.

// clientGone is the error of a request whose client went away: nobody reads it.
func clientGone(op string, ctx context.Context) error {
	return fmt.Errorf("%s: client gone: %w: %w", op, ErrUnavailable, ctx.Err())
}

// lockWait is a non-fair wait (waitLock).
type lockWait struct {
	s       *Store
	ctx     context.Context
	r       AcquireRequest
	ids     requestIDs
	held    *HeldError // the latest holder: the answer when the wait ends ungranted
	w       *waiter
	ev      *eventWait
	f       func(AcquireResult, error)
	last    bool // the wait is over: one last look, so the answer is today's
	forward bool // a release it was given must go to the next waiter when it leaves
	echo    bool // a call of it was answered only by its retry (reply.echo), and nothing undoes it yet
}

// waitLock is a non-fair wait: it tries again when a release is announced, when the
// holder's lease should have run out, and when the pub/sub connection comes back.
// It answers a *HeldError with the latest holder when the wait ends ungranted.
func (s *Store) waitLock(ctx context.Context, r AcquireRequest, ids requestIDs, held *HeldError, echo bool, f func(AcquireResult, error)) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		if echo {
			s.echoed(ids.undo(r.Name), err)
		}
		f(AcquireResult{}, err)
		return
	}
	lw := &lockWait{s: s, ctx: ctx, r: r, ids: ids, held: held, f: f, ev: newEventWait(), echo: echo}
	lw.w = s.disp.add(r.Name, s.channel(r.Name), kindAcquire, ids.lh, r.Shared, lw.ev.wake)
	lw.ev.start(s, ctx, r.Wait, lw.step, func(err error) { lw.forward = true; lw.finish(AcquireResult{}, err) })
}

func (lw *lockWait) step(ev event) bool {
	s, r, ids := lw.s, lw.r, lw.ids
	switch {
	case ev&evGone != 0:
		lw.forward = true
		return lw.finish(AcquireResult{}, clientGone("acquire", lw.ctx))
	case ev&evShutdown != 0:
		s.count("held")
		return lw.finish(AcquireResult{}, lw.held)
	case ev&evDeadline != 0:
		lw.last = true
	}
	s.disp.take(lw.w)
	woke := time.Now()
	lw.forward = true // until this try has an answer, a release it was given is not lost
	// Retried when the connection breaks: idempotent, see Acquire.
	args := s.acquireArgs(r, ids, ids.lh, "new", 0)
	rep, err := s.runCall(lw.ctx, s.acquire, "acquire", ids.keys(s, r.Name), true, true, args...)
	if err != nil {
		u := ids.undo(r.Name)
		u.until = notAfterOf(args)
		s.failed(u, err)
		if uncertain(err) {
			lw.echo = false // undone, its tombstone until this call's deadline, the latest
		}
		return lw.finish(AcquireResult{}, err)
	}
	lw.forward = false
	lw.echo = lw.echo || rep.echo
	switch rep.code {
	case "busy":
		lw.held = rep.held()
		if lw.last {
			s.count("held")
			return lw.finish(AcquireResult{}, lw.held)
		}
		s.disp.observe(lw.w, lw.held.wake)
		return false
	case "granted":
		l := rep.lease(r.Name, ids.lease)
		s.disp.observe(lw.w, l.TTL) // the waiters left behind wait for this lease
		// A shared hold may leave room for the next waiter too: let it try.
		lw.forward = l.Shared
		if lw.ctx.Err() != nil {
			lw.forward = true
			lw.echo = false // undone with its tombstone, which lasts until the latest call's deadline
			s.dropGrant(ids.undo(r.Name))
			return lw.finish(AcquireResult{}, clientGone("acquire", lw.ctx))
		}
		s.count("granted")
		s.m.Handoff.Observe(time.Since(woke).Seconds())
		return lw.finish(AcquireResult{Lease: l}, nil)
	}
	if res, err, done := s.settled(lw.ctx, r, ids, rep); done {
		return lw.finish(res, err)
	}
	return lw.finish(AcquireResult{}, unexpected("acquire", rep))
}

// finish ends the wait and hands its answer on.
func (lw *lockWait) finish(res AcquireResult, err error) bool {
	lw.ev.end()
	if lw.echo && res.Lease == nil { // (an idempotent request is never undone: see requestIDs.undo)
		lw.s.echoed(lw.ids.undo(lw.r.Name), err)
	}
	lw.s.disp.remove(lw.w, lw.forward)
	lw.s.releaseWaiter()
	lw.f(res, err)
	return true
}

// failed counts an acquire whose call failed and, when the script may still have
// run (or run later), has what it may have been granted undone.
func (s *Store) failed(u undo, err error) {
	s.count("error")
	if uncertain(err) {
		u.tomb = true
		s.undo(u)
	}
}

// dropGrant undoes a grant (or a ticket) made for a client that has gone: nobody
// else can ever learn its id, so keeping it would block the lock for its whole
// ttl.
func (s *Store) dropGrant(u undo) {
	s.count("abandoned")
	s.undo(u)
}

// waitFair is a fair acquire with a wait: the first check (after the subscription)
// queues a ticket unless the lock is free; then it waits for that ticket's grant.
func (s *Store) waitFair(ctx context.Context, r AcquireRequest, ids requestIDs, echo bool, f func(AcquireResult, error)) {
	if echo {
		// The first try (mode 'new') was answered only by its retry: should no
		// ticket or grant come of this wait (whose own tombstone stops that
		// try's copy), the request is undone with a tombstone of its own.
		answer := f
		f = func(res AcquireResult, err error) {
			if res.Lease == nil && res.Ticket == nil {
				s.echoed(ids.undo(r.Name), err)
			}
			answer(res, err)
		}
	}
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		f(AcquireResult{}, err)
		return
	}
	t := ticketWait{name: r.Name, ticket: ids.ticket, th: ids.th, tlh: ids.tlh, own: ids.lh, by: r.By, keep: ids.ik != "", pid: ids.pid,
		until: new(string), echo: new(bool)}
	t.enqueue = func(ctx context.Context, poll time.Duration) (reply, error) {
		args := s.acquireArgs(r, ids, ids.lh, "fair", poll)
		*t.until = notAfterOf(args)
		// Retried when the connection breaks: idempotent, see Acquire.
		return s.runCall(ctx, s.acquire, "acquire", ids.keys(s, r.Name), true, true, args...)
	}
	s.awaitTicket(ctx, t, time.Now().Add(r.Wait), func(res PollResult, err error) {
		s.releaseWaiter()
		f(s.fairResult(ctx, ids, res, err))
	})
}

// fairResult counts a fair acquire's wait by its outcome and turns it into the
// acquire's result.
func (s *Store) fairResult(ctx context.Context, ids requestIDs, res PollResult, err error) (AcquireResult, error) {
	var limit *LimitError
	switch {
	case errors.As(err, &limit):
		s.count("limit_mismatch")
		return AcquireResult{}, err
	case errors.Is(err, ErrIdempotencyUsed), errors.Is(err, ErrIdempotencyMismatch), errors.Is(err, ErrSessionNotFound):
		s.count("refused")
		return AcquireResult{}, err
	case err != nil && ctx.Err() != nil:
		s.count("abandoned")
		return AcquireResult{}, err
	case err != nil:
		s.count("error")
		return AcquireResult{}, err
	}
	if res.Lease != nil && res.Lease.ID == "" {
		res.Lease.ID = ids.lease // granted at once under the request's own lease
	}
	switch {
	case res.replayed:
		s.count("replayed")
	case res.Lease != nil:
		s.count("granted")
	default:
		s.count("queued")
	}
	return AcquireResult{Lease: res.Lease, Ticket: res.Ticket, Replayed: res.replayed}, nil
}

// Poll is a fair waiter's long-poll: it keeps the ticket alive (a poll in flight
// counts as alive) and returns the lease as soon as the lock is handed to the
// ticket, or the ticket with its position when wait ends first. A poll whose
// client goes away leaves the ticket queued, and a grant it was about to answer
// kept for the ticket's next poll for at most the ticket ttl. Errors:
// ErrTicketGone, ErrTooManyWaiters, ErrUnavailable.
func (s *Store) Poll(ctx context.Context, ref Ref, wait time.Duration) (PollResult, error) {
	var res PollResult
	var err error
	done := make(chan struct{})
	s.PollFunc(ctx, ref, wait, func(r PollResult, e error) { res, err = r, e; close(done) })
	<-done
	return res, err
}

// PollFunc is Poll handing its answer to f, which it calls exactly once: before
// it returns when the answer needs no wait, else on a goroutine of its own once
// the answer is known. No goroutine is held while the poll waits.
func (s *Store) PollFunc(ctx context.Context, ref Ref, wait time.Duration, f func(PollResult, error)) {
	if !plausibleID(ref.ID) {
		f(PollResult{}, ErrTicketGone)
		return
	}
	if ctx.Err() != nil {
		f(PollResult{}, clientGone("poll", ctx))
		return
	}
	f = tracked(s, f)
	t := ticketWait{name: ref.Name, ticket: ref.ID, th: hashID(ref.ID), tlh: hashID(ticketLease(ref.ID)), by: ref.By,
		pid: newID()[:11], until: new(string), echo: new(bool)}
	if wait <= 0 || s.shuttingDown() {
		res, err := s.pollOnce(ctx, t, 0)
		switch {
		case err != nil:
			if uncertain(err) {
				s.undoTicket(t, true)
			}
		case res.Lease != nil && ctx.Err() != nil:
			s.undoTicket(t, false)
			res, err = PollResult{}, clientGone("poll", ctx)
		}
		if res.Lease == nil {
			s.pollEchoed(t)
		}
		f(res, err)
		return
	}
	if err := s.reserveWaiter(); err != nil {
		f(PollResult{}, err)
		return
	}
	s.awaitTicket(ctx, t, time.Now().Add(wait), func(res PollResult, err error) {
		s.releaseWaiter()
		f(res, err)
	})
}

// ticketWait is a wait for a ticket's grant: a poll of a ticket the client holds,
// or a fair acquire with a wait (own and enqueue set) whose ticket the client has
// not seen yet.
type ticketWait struct {
	name, ticket string
	th, tlh      string  // the ticket's hash and its lease's hash
	own          string  // a fair acquire's own lease hash; "" for a poll
	by           string  // the principal waiting
	keep         bool    // an idempotent acquire: nothing to undo (its client retries)
	pid          string  // names this wait's polls (keep_ticket, unpoll.lua)
	until        *string // the "not after" of the wait's latest call, for its undo's tombstone
	echo         *bool   // a poll of the wait was answered only by its retry (reply.echo)
	// enqueue, for a fair acquire, makes the first check: it creates the ticket,
	// or grants at once under the request's own lease.
	enqueue func(context.Context, time.Duration) (reply, error)
}

// undoTicket undoes what a ticket wait may have left when its answer does not
// reach the client: a fair acquire's ticket and grant are dropped (the client
// never saw the ticket); a poll's grant is kept for the ticket's next poll, and
// so is an idempotent fair acquire's (its client gets it by retrying with its
// key). uncertain says a call of the wait had no definite answer, so a
// tombstone must stop it should it run later.
func (s *Store) undoTicket(t ticketWait, uncertain bool) {
	if t.own != "" && !t.keep {
		s.undo(undo{name: t.name, lh: t.own, th: t.th, tlh: t.tlh, tomb: uncertain, keep: t.keep, until: *t.until})
		return
	}
	s.undo(undo{name: t.name, th: t.th, tlh: t.tlh, poll: true, pid: t.pid, by: t.by, tomb: uncertain, until: *t.until})
}

// pollEchoed ends a ticket wait that handed over no grant while one of its
// polls was answered only by its retry: that poll's first copy may still reach
// Redis and claim a grant made to the ticket since, for an answer that goes
// nowhere. As for a poll undone, its tombstone stops that copy, and a grant it
// claimed already is kept for the ticket's next poll (unpoll.lua).
func (s *Store) pollEchoed(t ticketWait) {
	if t.echo != nil && *t.echo {
		*t.echo = false
		s.undo(undo{name: t.name, th: t.th, tlh: t.tlh, poll: true, pid: t.pid, by: t.by, tomb: true, until: *t.until})
	}
}

func (s *Store) pollOnce(ctx context.Context, t ticketWait, poll time.Duration) (PollResult, error) {
	keys := append(s.keys(t.name), s.ticketKey(t.name, t.th))
	*t.until = s.notAfter(keys[0])
	rep, err := s.runCall(ctx, s.poll, "poll", keys, true, true, t.th, t.tlh, ms(poll), t.by, t.pid, *t.until)
	if err != nil {
		return PollResult{}, err
	}
	if rep.echo {
		*t.echo = true
	}
	return ticketResult(t.name, t.ticket, rep)
}

func ticketResult(name, ticket string, rep reply) (PollResult, error) {
	switch rep.code {
	case "granted", "ticket_granted":
		id := ticketLease(ticket)
		return PollResult{Lease: rep.lease(name, id)}, nil
	case "queued":
		return PollResult{Ticket: rep.ticket(name, ticket), holderTTL: rep.queuedHolderTTL()}, nil
	case "gone":
		return PollResult{}, ErrTicketGone
	case "abandoned":
		return PollResult{}, fmt.Errorf("acquire: abandoned before it ran: %w", ErrUnavailable)
	case "limit_mismatch":
		return PollResult{}, &LimitError{Limit: int(rep.int(0))}
	case "replayed_ticket":
		return PollResult{Lease: rep.lease(name, ticketLease(ticket)), replayed: true}, nil
	case "replayed_queued":
		return PollResult{Ticket: rep.ticket(name, ticket), holderTTL: rep.queuedHolderTTL(), replayed: true}, nil
	case "idem_used":
		return PollResult{}, ErrIdempotencyUsed
	case "idem_mismatch":
		return PollResult{}, ErrIdempotencyMismatch
	case "session_gone":
		return PollResult{}, ErrSessionNotFound
	default:
		return PollResult{}, unexpected("poll", rep)
	}
}
