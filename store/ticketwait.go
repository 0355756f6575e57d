package store

import (
	"context"
	"slices"
	"time"
)

// ticketAwait is a wait for a ticket's grant (awaitTicket).
type ticketAwait struct {
	s     *Store
	ctx   context.Context
	t     ticketWait
	until time.Time
	w     *waiter
	ev    *eventWait
	f     func(PollResult, error)

	first    bool // a fair acquire's first check, which creates the ticket, is still to come
	replayed bool // the first check replayed an Idempotency-Key's ticket
}

// awaitTicket waits for a ticket's grant until the deadline and hands the answer
// to f. For a fair acquire (t.acquire set), its first check creates the ticket
// (a "granted" reply then carries the request's own lease, returned with an
// empty ID for the caller to fill in). The ticket is kept alive while the wait
// lasts and for the ticket ttl after it. Whenever its answer cannot reach the
// client (gone, or a call whose outcome stayed unknown), what the wait may
// have left is undone (ticketWait.undo).
func (s *Store) awaitTicket(ctx context.Context, t ticketWait, until time.Time, f func(PollResult, error)) {
	if ctx.Err() != nil { // nothing is created for a client already gone
		f(PollResult{}, clientGone("poll", ctx))
		return
	}
	ta := &ticketAwait{s: s, ctx: ctx, t: t, until: until, f: f, first: t.acquire != nil, ev: newEventWait()}
	ta.w = s.disp.add(t.name, s.channel(t.name), kindTicket, t.th, false, ta.ev.wake)
	ta.ev.start(s, ctx, time.Until(until), ta.step, func(err error) { ta.finish(PollResult{}, err) })
}

func (ta *ticketAwait) step(ev event) bool {
	s, t := ta.s, ta.t
	switch {
	case ev&evGone != 0:
		if !ta.first { // a fair acquire gone before its first check created nothing
			s.undo(t.undo())
		}
		return ta.finish(PollResult{}, clientGone("poll", ta.ctx))
	case ev&(evShutdown|evDeadline) != 0:
		return ta.finish(ta.end())
	}
	_, g := s.disp.take(ta.w)
	if g != nil && slices.Contains(g.polls, t.pid) && !ta.first && s.opt.WaitReplicas == 0 {
		// Handed to this very wait by the script that freed the lock, at its
		// full ttl: answer straight from the message. (Not with WaitReplicas:
		// the message can arrive before that script's WAIT returns, so the poll
		// below answers, after a WAIT of its own.) The ttl is the grant's, less
		// the time since the message came (the Redis clock is the authority).
		s.m.Handoff.Observe(s.handoffLatency(s.lockKey(t.name), g).Seconds())
		return ta.finish(ta.settle(PollResult{Lease: &Lease{
			Name: t.name, ID: ticketLease(t.ticket), Fence: g.fence, Count: 1,
			TTL: max(g.window-time.Since(g.recv), 0), ExpiresAt: g.at.Add(g.window),
			Owner: g.owner, AcquiredAt: g.at, Shared: g.shared, Limit: g.limit,
		}, replayed: ta.replayed}, nil))
	}
	res, err := ta.settle(ta.check(ta.ctx, time.Until(ta.until)))
	if err != nil || res.Lease != nil {
		if g != nil && res.Lease != nil {
			s.m.Handoff.Observe(s.handoffLatency(s.lockKey(t.name), g).Seconds())
		}
		return ta.finish(res, err)
	}
	s.disp.observe(ta.w, res.holderTTL)
	return false
}

// check looks at the ticket (a fair acquire's first check creates it),
// telling Redis that a poll of poll stays in flight.
func (ta *ticketAwait) check(ctx context.Context, poll time.Duration) (PollResult, error) {
	t := ta.t
	if !ta.first {
		res, err := ta.s.pollOnce(ctx, t, poll)
		res.replayed = res.replayed || ta.replayed
		return res, err
	}
	rep, err := ta.s.run(ctx, ta.s.acquireCall(*t.acquire, t.ids, "fair", poll, 0))
	if err != nil {
		return PollResult{}, err
	}
	ta.first = false
	switch rep.code {
	case "granted":
		return PollResult{Lease: rep.lease(t.name, "")}, nil
	case "replayed":
		return PollResult{Lease: rep.lease(t.name, ""), replayed: true}, nil
	}
	res, err := ticketResult(t.name, t.ticket, rep)
	ta.replayed = res.replayed
	return res, err
}

// settle ends a check: its result stands only while the client is there.
func (ta *ticketAwait) settle(res PollResult, err error) (PollResult, error) {
	switch {
	case err != nil:
		if unknown(err) || (ta.t.acquire != nil && !ta.first) {
			// What the wait made is unknown; or a fair acquire's client never
			// learns the ticket its first check queued (a look refused once the
			// store closed, an error reply): it must not wait for a grant
			// nobody claims.
			ta.s.undo(ta.t.undo())
		}
		return res, err
	case ta.ctx.Err() != nil:
		ta.s.undo(ta.t.undo())
		return PollResult{}, clientGone("poll", ta.ctx)
	}
	return res, nil
}

// end is the last check of a wait that ends ungranted: it tells Redis no poll is
// in flight any more, so the ticket lives the ticket ttl from now.
func (ta *ticketAwait) end() (PollResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ta.ctx), WorstCall)
	defer cancel()
	return ta.settle(ta.check(ctx, 0))
}

// finish ends the wait and hands its answer on.
func (ta *ticketAwait) finish(res PollResult, err error) bool {
	ta.ev.end()
	ta.s.disp.remove(ta.w, false)
	ta.f(res, err)
	return true
}
