package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// clientGone is the error of a request whose client went away: nobody reads it.
func clientGone(op string, ctx context.Context) error {
	return fmt.Errorf("%s: client gone: %w: %w", op, ErrUnavailable, ctx.Err())
}

// waitLock is a non-fair wait: it tries again when a release is announced, when the
// holder's lease should have run out, and when the pub/sub connection comes back.
// It returns a *HeldError with the latest holder when the wait ends ungranted.
func (s *Store) waitLock(ctx context.Context, r AcquireRequest, ids requestIDs, held *HeldError) (AcquireResult, error) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		return AcquireResult{}, err
	}
	defer s.releaseWaiter()
	w := s.disp.add(r.Name, s.channel(r.Name), kindAcquire, ids.lh, r.Shared)
	forward := false
	defer func() { s.disp.remove(w, forward) }()

	deadline := time.NewTimer(r.Wait)
	defer deadline.Stop()
	last := false // the wait is over: one last look, so the answer is today's
	for {
		select {
		case <-w.signal:
		case <-deadline.C:
			last = true
		case <-s.shutdown:
			s.count("held")
			return AcquireResult{}, held
		case <-ctx.Done():
			forward = true
			return AcquireResult{}, clientGone("acquire", ctx)
		}
		s.disp.take(w)
		woke := time.Now()
		forward = true // until this try has an answer, a release it was given is not lost
		// Retried when the connection breaks: idempotent, see Acquire.
		args := s.acquireArgs(r, ids, ids.lh, "new", 0)
		rep, err := s.runCall(ctx, s.acquire, "acquire", ids.keys(s, r.Name), true, true, args...)
		if err != nil {
			u := ids.undo(r.Name)
			u.until = notAfterOf(args)
			s.failed(u, err)
			return AcquireResult{}, err
		}
		forward = false
		switch rep.code {
		case "busy":
			held = rep.held()
			if last {
				s.count("held")
				return AcquireResult{}, held
			}
			s.disp.observe(w, held.wake)
			continue
		case "granted":
			l := rep.lease(r.Name, ids.lease)
			s.disp.observe(w, l.TTL) // the waiters left behind wait for this lease
			// A shared hold may leave room for the next waiter too: let it try.
			forward = l.Shared
			if ctx.Err() != nil {
				forward = true
				s.dropGrant(ids.undo(r.Name))
				return AcquireResult{}, clientGone("acquire", ctx)
			}
			s.count("granted")
			s.m.Handoff.Observe(time.Since(woke).Seconds())
			return AcquireResult{Lease: l}, nil
		}
		if res, err, done := s.settled(ctx, r, ids, rep); done {
			return res, err
		}
		return AcquireResult{}, unexpected("acquire", rep)
	}
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
func (s *Store) waitFair(ctx context.Context, r AcquireRequest, ids requestIDs) (AcquireResult, error) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		return AcquireResult{}, err
	}
	defer s.releaseWaiter()
	t := ticketWait{name: r.Name, ticket: ids.ticket, th: ids.th, tlh: ids.tlh, own: ids.lh, by: r.By, keep: ids.ik != "", pid: ids.pid,
		until: new(string)}
	t.enqueue = func(ctx context.Context, poll time.Duration) (reply, error) {
		args := s.acquireArgs(r, ids, ids.lh, "fair", poll)
		*t.until = notAfterOf(args)
		// Retried when the connection breaks: idempotent, see Acquire.
		return s.runCall(ctx, s.acquire, "acquire", ids.keys(s, r.Name), true, true, args...)
	}
	res, err := s.awaitTicket(ctx, t, time.Now().Add(r.Wait))
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
	if !plausibleID(ref.ID) {
		return PollResult{}, ErrTicketGone
	}
	if ctx.Err() != nil {
		return PollResult{}, clientGone("poll", ctx)
	}
	defer s.track()()
	t := ticketWait{name: ref.Name, ticket: ref.ID, th: hashID(ref.ID), tlh: hashID(ticketLease(ref.ID)), by: ref.By,
		pid: newID()[:11], until: new(string)}
	if wait <= 0 || s.shuttingDown() {
		res, err := s.pollOnce(ctx, t, 0)
		switch {
		case err != nil:
			if uncertain(err) {
				s.undoTicket(t, true)
			}
		case res.Lease != nil && ctx.Err() != nil:
			s.undoTicket(t, false)
			return PollResult{}, clientGone("poll", ctx)
		}
		return res, err
	}
	if err := s.reserveWaiter(); err != nil {
		return PollResult{}, err
	}
	defer s.releaseWaiter()
	return s.awaitTicket(ctx, t, time.Now().Add(wait))
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

func (s *Store) pollOnce(ctx context.Context, t ticketWait, poll time.Duration) (PollResult, error) {
	keys := append(s.keys(t.name), s.ticketKey(t.name, t.th))
	*t.until = s.notAfter(keys[0])
	rep, err := s.runCall(ctx, s.poll, "poll", keys, true, true, t.th, t.tlh, ms(poll), t.by, t.pid, *t.until)
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

// awaitTicket waits for a ticket's grant until the deadline. With t.enqueue set,
// its first check creates the ticket (a "granted" reply then carries the request's
// own lease, returned with an empty ID for the caller to fill in). The ticket is
// kept alive while the wait lasts and for the ticket ttl after it. Whenever its
// answer cannot reach the client (gone, or a call without a definite answer),
// what the wait may have left is undone (undoTicket).
func (s *Store) awaitTicket(ctx context.Context, t ticketWait, until time.Time) (PollResult, error) {
	if ctx.Err() != nil { // nothing is created for a client already gone
		return PollResult{}, clientGone("poll", ctx)
	}
	w := s.disp.add(t.name, s.channel(t.name), kindTicket, t.th, false)
	defer s.disp.remove(w, false)
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()

	enqueue := t.enqueue
	replayed := false // the first check replayed an Idempotency-Key's ticket
	check := func(ctx context.Context, poll time.Duration) (PollResult, error) {
		if enqueue == nil {
			res, err := s.pollOnce(ctx, t, poll)
			res.replayed = res.replayed || replayed
			return res, err
		}
		rep, err := enqueue(ctx, poll)
		if err != nil {
			return PollResult{}, err
		}
		enqueue = nil
		switch rep.code {
		case "granted":
			return PollResult{Lease: rep.lease(t.name, "")}, nil
		case "replayed":
			return PollResult{Lease: rep.lease(t.name, ""), replayed: true}, nil
		}
		res, err := ticketResult(t.name, t.ticket, rep)
		replayed = res.replayed
		return res, err
	}
	// settle ends a check: its result stands only while the client is there.
	settle := func(res PollResult, err error) (PollResult, error) {
		switch {
		case err != nil:
			if uncertain(err) {
				s.undoTicket(t, true)
			}
			return res, err
		case ctx.Err() != nil:
			s.undoTicket(t, false)
			return PollResult{}, clientGone("poll", ctx)
		}
		return res, nil
	}
	// end is the last check of a wait that ends ungranted: it tells Redis no poll is
	// in flight any more, so the ticket lives the ticket ttl from now.
	end := func() (PollResult, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return settle(check(ctx, 0))
	}

	for {
		select {
		case <-w.signal:
		case <-deadline.C:
			return end()
		case <-s.shutdown:
			return end()
		case <-ctx.Done():
			if enqueue == nil || t.own == "" {
				s.undoTicket(t, false) // a fair acquire gone before its first check created nothing
			}
			return PollResult{}, clientGone("poll", ctx)
		}
		_, g := s.disp.take(w)
		if g != nil && g.claimed && enqueue == nil && s.opt.WaitReplicas == 0 {
			// Handed over by the script that freed the lock, at its full ttl: answer
			// straight from the message. Not with WaitReplicas: the message can
			// arrive before that script's WAIT returns, so the poll below answers,
			// after a WAIT of its own. The ttl is the grant's, less the time since
			// the message came (the Redis clock is the authority, not ours).
			s.m.Handoff.Observe(s.handoffLatency(s.lockKey(t.name), g).Seconds())
			return settle(PollResult{Lease: &Lease{
				Name: t.name, ID: ticketLease(t.ticket), Fence: g.fence, Count: 1,
				TTL: max(g.window-time.Since(g.recv), 0), ExpiresAt: g.at.Add(g.window),
				Owner: g.owner, AcquiredAt: g.at, Shared: g.shared, Limit: g.limit,
			}}, nil)
		}
		res, err := settle(check(ctx, time.Until(until)))
		if err != nil || res.Lease != nil {
			if g != nil && res.Lease != nil {
				s.m.Handoff.Observe(s.handoffLatency(s.lockKey(t.name), g).Seconds())
			}
			return res, err
		}
		s.disp.observe(w, res.holderTTL)
	}
}

// Watch returns the lock's state, first waiting up to wait while it is held with
// the given fence (nil: its fence now), for its holds to change: a hold released,
// expired or added, or the lock changing hands. Errors: ErrTooManyWaiters,
// ErrUnavailable.
func (s *Store) Watch(ctx context.Context, name string, fence *int64, wait time.Duration) (State, error) {
	st, err := s.State(ctx, name)
	if err != nil || wait <= 0 || !st.Held || (fence != nil && *fence != st.Fence) || s.shuttingDown() {
		return st, err
	}
	f, n := st.Fence, st.Holders
	if err := s.reserveWaiter(); err != nil {
		return State{}, err
	}
	defer s.releaseWaiter()
	w := s.disp.add(name, s.channel(name), kindWatch, "", false)
	defer s.disp.remove(w, false)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-w.signal:
		case <-deadline.C:
			return s.State(ctx, name)
		case <-s.shutdown:
			return s.State(ctx, name)
		case <-ctx.Done():
			return State{}, fmt.Errorf("watch: %w: %w", ErrUnavailable, ctx.Err())
		}
		s.disp.take(w)
		st, err := s.State(ctx, name)
		if err != nil || !st.Held || st.Fence != f || st.Holders != n {
			return st, err
		}
		s.disp.observe(w, soonestEnd(st))
	}
}

// soonestEnd is the time until the first of the listed holds ends: when a watch
// should look again even if nobody announces anything (expiry runs no script).
func soonestEnd(st State) time.Duration {
	d := st.TTL
	for _, h := range st.Holds {
		d = min(d, h.TTL)
	}
	return d
}
