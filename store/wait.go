package store

import (
	"context"
	"fmt"
	"time"
)

// waitLock is a non-fair wait: it tries again when a release is announced, when the
// holder's lease should have run out, and when the pub/sub connection comes back.
// It returns a *HeldError with the latest holder when the wait ends ungranted.
func (s *Store) waitLock(ctx context.Context, r AcquireRequest, id string, held *HeldError) (*Lease, error) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		return nil, err
	}
	defer s.releaseWaiter()
	lh := hashID(id)
	keys := append(s.keys(r.Name), s.keys(r.Name)[0])
	w := s.disp.add(r.Name, s.channel(r.Name), kindAcquire, "")
	forward := false
	defer func() { s.disp.remove(w, forward) }()

	deadline := time.NewTimer(r.Wait)
	defer deadline.Stop()
	for {
		select {
		case <-w.signal:
		case <-deadline.C:
			s.count("held")
			return nil, held
		case <-s.shutdown:
			s.count("held")
			return nil, held
		case <-ctx.Done():
			forward = true
			return nil, fmt.Errorf("acquire: %w: %w", ErrUnavailable, ctx.Err())
		}
		s.disp.take(w)
		woke := time.Now()
		forward = true // until this try has an answer, a release it was given is not lost
		// Retried when the connection breaks: idempotent, see Acquire.
		rep, err := s.runGrant(ctx, s.acquire, "acquire", keys, true,
			lh, ms(r.TTL), r.Owner, "new", "", "", 0, 0)
		if err != nil {
			s.count("error")
			return nil, err
		}
		forward = false
		switch rep.code {
		case "granted":
			s.count("granted")
			s.m.Handoff.Observe(time.Since(woke).Seconds())
			l := rep.lease(r.Name, id)
			s.disp.observe(w, l.TTL) // the waiters left behind wait for this lease
			if err := s.abandoned(ctx, r.Name, id); err != nil {
				forward = true
				return nil, err
			}
			return l, nil
		case "busy":
			held = rep.held()
			s.disp.observe(w, held.TTL)
		default:
			return nil, unexpected("acquire", rep)
		}
	}
}

// waitFair is a fair acquire with a wait: the first check (after the subscription)
// queues a ticket unless the lock is free; then it waits for that ticket's grant.
func (s *Store) waitFair(ctx context.Context, r AcquireRequest, id string) (AcquireResult, error) {
	if err := s.reserveWaiter(); err != nil {
		s.count("too_many_waiters")
		return AcquireResult{}, err
	}
	defer s.releaseWaiter()
	tid := newID()
	th := hashID(tid)
	keys := append(s.keys(r.Name), s.ticketKey(r.Name, th))
	until := time.Now().Add(r.Wait)
	enqueue := func(ctx context.Context, poll time.Duration) (reply, error) {
		// Retried when the connection breaks: idempotent, see Acquire.
		return s.runGrant(ctx, s.acquire, "acquire", keys, true,
			hashID(id), ms(r.TTL), r.Owner, "fair", th, hashID(ticketLease(tid)), ms(s.opt.TicketTTL), ms(poll))
	}
	res, err := s.awaitTicket(ctx, r.Name, tid, until, enqueue)
	if err != nil {
		s.count("error")
		return AcquireResult{}, err
	}
	if res.Lease != nil && res.Lease.ID == "" {
		res.Lease.ID = id // granted at once under the request's own lease
	}
	if res.Lease != nil {
		s.count("granted")
	} else {
		s.count("queued")
	}
	return AcquireResult{Lease: res.Lease, Ticket: res.Ticket}, nil
}

// Poll is a fair waiter's long-poll: it keeps the ticket alive (a poll in flight
// counts as alive) and returns the lease as soon as the lock is handed to the
// ticket, or the ticket with its position when wait ends first. Errors:
// ErrTicketGone, ErrTooManyWaiters, ErrUnavailable.
func (s *Store) Poll(ctx context.Context, name, ticket string, wait time.Duration) (PollResult, error) {
	if !plausibleID(ticket) {
		return PollResult{}, ErrTicketGone
	}
	if wait <= 0 || s.shuttingDown() {
		return s.pollOnce(ctx, name, ticket, 0)
	}
	if err := s.reserveWaiter(); err != nil {
		return PollResult{}, err
	}
	defer s.releaseWaiter()
	return s.awaitTicket(ctx, name, ticket, time.Now().Add(wait), nil)
}

func (s *Store) pollOnce(ctx context.Context, name, ticket string, poll time.Duration) (PollResult, error) {
	th := hashID(ticket)
	keys := append(s.keys(name), s.ticketKey(name, th))
	rep, err := s.runGrant(ctx, s.poll, "poll", keys, true, th, hashID(ticketLease(ticket)), ms(poll))
	if err != nil {
		return PollResult{}, err
	}
	return ticketResult(name, ticket, rep)
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
	default:
		return PollResult{}, unexpected("poll", rep)
	}
}

// awaitTicket waits for a ticket's grant until the deadline. With enqueue set, its
// first check creates the ticket (a "granted" reply then carries the request's own
// lease, returned with an empty ID for the caller to fill in). The ticket is kept
// alive while the wait lasts and for the ticket ttl after it.
func (s *Store) awaitTicket(ctx context.Context, name, ticket string, until time.Time, enqueue func(context.Context, time.Duration) (reply, error)) (PollResult, error) {
	th := hashID(ticket)
	w := s.disp.add(name, s.channel(name), kindTicket, th)
	defer s.disp.remove(w, false)
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()

	check := func(ctx context.Context, poll time.Duration) (PollResult, error) {
		if enqueue == nil {
			return s.pollOnce(ctx, name, ticket, poll)
		}
		rep, err := enqueue(ctx, poll)
		if err != nil {
			return PollResult{}, err
		}
		enqueue = nil
		if rep.code == "granted" {
			return PollResult{Lease: rep.lease(name, "")}, nil
		}
		return ticketResult(name, ticket, rep)
	}
	// end is the last check of a wait that ends ungranted: it tells Redis no poll is
	// in flight any more, so the ticket lives the ticket ttl from now.
	end := func() (PollResult, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return check(ctx, 0)
	}

	for {
		select {
		case <-w.signal:
		case <-deadline.C:
			return end()
		case <-s.shutdown:
			return end()
		case <-ctx.Done():
			_, _ = end()
			return PollResult{}, fmt.Errorf("poll: %w: %w", ErrUnavailable, ctx.Err())
		}
		_, g := s.disp.take(w)
		if g != nil && g.claimed && enqueue == nil && s.opt.WaitReplicas == 0 {
			// Handed over by the script that freed the lock, at its full ttl: answer
			// straight from the message. Not with WaitReplicas: the message can
			// arrive before that script's WAIT returns, so the poll below answers,
			// after a WAIT of its own.
			s.m.Handoff.Observe(max(time.Since(g.at), 0).Seconds())
			return PollResult{Lease: &Lease{
				Name: name, ID: ticketLease(ticket), Fence: g.fence, Count: 1,
				TTL: max(time.Until(g.at.Add(g.window)), 0), ExpiresAt: g.at.Add(g.window),
				Owner: g.owner, AcquiredAt: g.at,
			}}, nil
		}
		res, err := check(ctx, time.Until(until))
		if err != nil || res.Lease != nil {
			if g != nil && res.Lease != nil {
				s.m.Handoff.Observe(max(time.Since(g.at), 0).Seconds())
			}
			return res, err
		}
		s.disp.observe(w, res.holderTTL)
	}
}

// Watch returns the lock's state, first waiting up to wait while it is held with
// the given fence (nil: its fence now), for it to be released, expire or change
// hands. Errors: ErrTooManyWaiters, ErrUnavailable.
func (s *Store) Watch(ctx context.Context, name string, fence *int64, wait time.Duration) (State, error) {
	st, err := s.State(ctx, name)
	if err != nil || wait <= 0 || !st.Held || (fence != nil && *fence != st.Fence) || s.shuttingDown() {
		return st, err
	}
	f := st.Fence
	if err := s.reserveWaiter(); err != nil {
		return State{}, err
	}
	defer s.releaseWaiter()
	w := s.disp.add(name, s.channel(name), kindWatch, "")
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
		if err != nil || !st.Held || st.Fence != f {
			return st, err
		}
		s.disp.observe(w, st.TTL)
	}
}
