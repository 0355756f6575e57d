package store

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton/lua"
)

// Every wait below is an eventWait (events.go): its loop of "wait for an event,
// then look at Redis" is a step function run once per batch of events, and its
// answer goes to a callback, so that no goroutine is held while it waits. The
// steps keep the order and the choices of a select loop: a client gone first,
// then the shutdown, then the deadline, then the dispatcher's wake.

// lockWait is a non-fair wait (waitLock).
type lockWait struct {
	s       *Store
	ctx     context.Context
	r       AcquireRequest
	ids     requestIDs
	until   time.Time
	held    *HeldError // the latest holder: the answer when the wait ends ungranted
	w       *waiter
	ev      *eventWait
	f       func(AcquireResult, error)
	last    bool // the wait is over: one last look, so the answer is today's
	forward bool // a release it was given must go to the next waiter when it leaves
}

// waitLock is a non-fair wait: it tries again when a release is announced, when the
// holder's lease should have run out, and when the pub/sub connection comes back.
// It answers a *HeldError with the latest holder when the wait ends ungranted.
func (s *Store) waitLock(ctx context.Context, r AcquireRequest, ids requestIDs, held *HeldError, f func(AcquireResult, error)) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		f(AcquireResult{}, err)
		return
	}
	lw := &lockWait{s: s, ctx: ctx, r: r, ids: ids, held: held, f: f, ev: newEventWait(), until: time.Now().Add(r.Wait)}
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
	rep, err := s.run(lw.ctx, s.acquireCall(r, ids, "new", 0, max(time.Until(lw.until), 0)))
	if err != nil {
		s.failed(ids.undo(r), err)
		return lw.finish(AcquireResult{}, err)
	}
	lw.forward = false
	if rep.code == "busy" {
		lw.held = rep.held()
		if lw.last {
			s.count("held")
			return lw.finish(AcquireResult{}, lw.held)
		}
		s.disp.observe(lw.w, lw.held.wake)
		return false
	}
	res, err, _ := s.answer(lw.ctx, r, ids, rep)
	if res.Lease != nil {
		s.disp.observe(lw.w, res.Lease.TTL) // the waiters left behind wait for this lease
		lw.forward = res.Lease.Shared       // a shared hold may leave room for the next waiter too
		if !res.Replayed {
			s.m.Handoff.Observe(time.Since(woke).Seconds())
		}
	} else {
		lw.forward = true
	}
	return lw.finish(res, err)
}

// finish ends the wait and hands its answer on.
func (lw *lockWait) finish(res AcquireResult, err error) bool {
	lw.ev.end()
	lw.s.disp.remove(lw.w, lw.forward)
	lw.s.releaseWaiter()
	lw.f(res, err)
	return true
}

// waitFair is a fair acquire with a wait: the first check (after the subscription)
// queues a ticket unless the lock is free; then it waits for that ticket's grant.
func (s *Store) waitFair(ctx context.Context, r AcquireRequest, ids requestIDs, f func(AcquireResult, error)) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		f(AcquireResult{}, err)
		return
	}
	t := ticketWait{name: r.Name, ticket: ids.ticket, th: ids.th, tlh: ids.tlh, by: r.By, pid: ids.pid,
		acquire: &r, ids: ids}
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
	f = s.pollSettling(ctx, ref, tracked(s, f))
	s.capPolling(ctx, ref, wait) // before the poll: the ticket lives at least as long as it
	t := ticketWait{name: ref.Name, ticket: ref.ID, th: hashID(ref.ID), tlh: hashID(ticketLease(ref.ID)), by: ref.By,
		pid: tag()}
	if wait <= 0 || s.shuttingDown() {
		res, err := s.pollOnce(ctx, t, 0)
		switch {
		case err != nil:
			if unknown(err) {
				s.undo(t.undo())
			}
		case res.Lease != nil && ctx.Err() != nil:
			s.undo(t.undo())
			res, err = PollResult{}, clientGone("poll", ctx)
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
// or a fair acquire with a wait (acquire set) whose ticket the client has not
// seen yet.
type ticketWait struct {
	name, ticket string
	th, tlh      string // the ticket's hash and its lease's hash
	by           string // the principal waiting
	pid          string // names this wait's polls
	// acquire and ids, for a fair acquire: its first check creates the
	// ticket (or grants at once under the request's own lease).
	acquire *AcquireRequest
	ids     requestIDs
}

// undo is what undoing the wait touches when its answer does not reach the
// client: a fair acquire's ticket and grant are dropped when the client can
// never learn them (no key); otherwise only this wait's poll is taken out, and
// a grant made to it waits for the ticket's next poll.
func (t ticketWait) undo() undo {
	if t.acquire != nil {
		return t.ids.undo(*t.acquire)
	}
	return undo{name: t.name, th: t.th, tlh: t.tlh, ticket: "poll", pid: t.pid, by: t.by}
}

func (s *Store) pollOnce(ctx context.Context, t ticketWait, poll time.Duration) (PollResult, error) {
	a := lua.PollArgs{Ticket: t.th, TicketLease: t.tlh, Poll: ms(poll), By: t.by, PollID: t.pid}
	rep, err := s.run(ctx, call{op: s.ss.poll, keys: []string{s.lockKey(t.name)}, again: true, grant: true,
		args: func(notAfter string) []any { a.NotAfter = notAfter; return a.List() }})
	if err != nil {
		return PollResult{}, err
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
