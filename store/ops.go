package store

import (
	"context"
	"errors"
	"time"

	"github.com/batonhq/baton/lua"
)

// Acquire grants a hold (exclusive, or shared with r.Shared), re-enters a held
// lease (r.Lease set), or, with r.Fair, queues a ticket when the lock is not
// granted within r.Wait. A non-fair request that is not granted within r.Wait
// returns a *HeldError (ErrLockHeld) and leaves no trace in Redis. With
// r.IdemKey, what the first request with that key made is answered again
// (Replayed). With r.Session, the hold joins the session and lasts as long.
// Other errors: ErrLeaseNotHeld and ErrModeMismatch (re-entry), a *LimitError
// (ErrLimitMismatch), ErrIdempotencyUsed, ErrIdempotencyMismatch,
// ErrSessionNotFound, a *CapError (ErrCapReached: a new hold, or ticket, past
// r.Caps), ErrTooManyWaiters, ErrUnavailable.
func (s *Store) Acquire(ctx context.Context, r AcquireRequest) (AcquireResult, error) {
	var res AcquireResult
	var err error
	done := make(chan struct{})
	s.AcquireFunc(ctx, r, func(x AcquireResult, e error) { res, err = x, e; close(done) })
	<-done
	return res, err
}

// AcquireFunc is Acquire handing its answer to f, which it calls exactly once:
// before it returns when the answer needs no wait (or the first look after
// subscribing settles it), else on a goroutine of its own once the answer is
// known. No goroutine is held while the request waits.
func (s *Store) AcquireFunc(ctx context.Context, r AcquireRequest, f func(AcquireResult, error)) {
	if r.Lease != "" {
		l, err := s.reenter(ctx, r)
		if err == nil {
			s.capRenewed(ctx, r.By, r.Caps, l) // a re-entry renews the hold
		}
		f(AcquireResult{Lease: l, Reentered: l != nil, Replayed: l.Replayed()}, err)
		return
	}
	if ctx.Err() != nil { // nothing is created for a client already gone
		f(AcquireResult{}, clientGone("acquire", ctx))
		return
	}
	f = tracked(s, f)
	ids, err := s.requestIDs(ctx, r)
	if err != nil {
		f(AcquireResult{}, err)
		return
	}
	adm, err := s.admitAcquire(ctx, r, ids) // nil, at no cost, when r.Caps caps nothing
	if err != nil {
		if errors.Is(err, ErrCapReached) {
			s.count("too_many_objects")
		} else {
			s.count("error")
		}
		f(AcquireResult{}, err)
		return
	}
	if adm != nil {
		f = adm.settling(ctx, f)
	}
	if ids.member == "" {
		s.tryAcquire(ctx, r, ids, f)
		return
	}
	s.tryAcquire(ctx, r, ids, func(res AcquireResult, err error) {
		if (res.Lease != nil || res.Ticket != nil) && !s.sessionAlive(ctx, r) {
			// The session ended (a DELETE) between the member joining and the grant:
			// what was made for it must not outlive it.
			s.undo(ids.undo(r))
			f(AcquireResult{}, ErrSessionNotFound)
			return
		}
		// A member whose acquire made nothing is forgotten by the session's next
		// renewal or look, once no longer pending: taking it out here could take out
		// a retry's (the same Idempotency-Key makes the same member).
		f(res, err)
	})
}

// tracked counts a request until its answer f is called (track: Close waits
// for requests that may still queue an undo, and a request queues it before
// it answers).
func tracked[T any](s *Store, f func(T, error)) func(T, error) {
	ended := s.track()
	return func(res T, err error) {
		ended()
		f(res, err)
	}
}

// tryAcquire makes the first try of an acquire and, when the lock is busy and
// the request may wait, waits.
func (s *Store) tryAcquire(ctx context.Context, r AcquireRequest, ids requestIDs, f func(AcquireResult, error)) {
	mode, wait := "new", time.Duration(0)
	switch {
	case r.Fair && (r.Wait <= 0 || s.shuttingDown()):
		// No wait: queue in the same call. With a wait, the first call only tries;
		// the ticket is made once this process has a waiter slot for it.
		mode = "fair"
	case !r.Fair && !s.shuttingDown():
		wait = r.Wait
	}
	rep, err := s.run(ctx, s.acquireCall(r, ids, mode, 0, wait))
	if err != nil {
		s.failed(ids.undo(r), err)
		f(AcquireResult{}, err)
		return
	}
	if res, err, done := s.answer(ctx, r, ids, rep); done {
		f(res, err)
		return
	}
	held := rep.held()
	switch {
	case r.Wait <= 0 || s.shuttingDown():
		s.count("held")
		f(AcquireResult{}, held)
	case r.Fair:
		s.waitFair(ctx, r, ids, f)
	default:
		s.waitLock(ctx, r, ids, held, f)
	}
}

func (s *Store) acquireCall(r AcquireRequest, ids requestIDs, mode string, poll, wait time.Duration) call {
	return call{op: s.ss.acquire, keys: []string{s.lockKey(r.Name)}, args: s.acquireArgs(r, ids, mode, poll, wait),
		again: true, grant: true}
}

// answer turns every acquire reply but 'busy' into its result; done is false
// for 'busy'. What was made for a client that has gone is undone.
func (s *Store) answer(ctx context.Context, r AcquireRequest, ids requestIDs, rep reply) (AcquireResult, error, bool) {
	switch rep.code {
	case "granted", "queued", "ticket_granted", "replayed", "replayed_ticket", "replayed_queued":
		if ctx.Err() != nil {
			s.count("abandoned")
			s.undo(ids.undo(r))
			return AcquireResult{}, clientGone("acquire", ctx), true
		}
	}
	switch rep.code {
	case "granted":
		s.count("granted")
		return AcquireResult{Lease: rep.lease(r.Name, ids.lease)}, nil, true
	case "queued":
		s.count("queued")
		return AcquireResult{Ticket: rep.ticket(r.Name, ids.ticket)}, nil, true
	case "ticket_granted":
		s.count("granted")
		return AcquireResult{Lease: rep.lease(r.Name, ticketLease(ids.ticket))}, nil, true
	case "replayed":
		s.count("replayed")
		return AcquireResult{Lease: rep.lease(r.Name, ids.lease), Replayed: true}, nil, true
	case "replayed_ticket":
		s.count("replayed")
		return AcquireResult{Lease: rep.lease(r.Name, ticketLease(ids.ticket)), Replayed: true}, nil, true
	case "replayed_queued":
		s.count("replayed")
		return AcquireResult{Ticket: rep.ticket(r.Name, ids.ticket), Replayed: true}, nil, true
	case "limit_mismatch":
		s.count("limit_mismatch")
		return AcquireResult{}, &LimitError{Limit: int(rep.int(0))}, true
	case "idem_used":
		s.count("idempotency_used")
		return AcquireResult{}, ErrIdempotencyUsed, true
	case "idem_mismatch":
		s.count("idempotency_mismatch")
		return AcquireResult{}, ErrIdempotencyMismatch, true
	case "session_gone":
		s.count("session_gone")
		return AcquireResult{}, ErrSessionNotFound, true
	case "busy":
		return AcquireResult{}, nil, false
	}
	return AcquireResult{}, unexpected("acquire", rep), true
}

// failed counts an acquire whose call failed and, when what it made is
// unknown (the call's deadline has passed by now), has it undone.
func (s *Store) failed(u undo, err error) {
	s.count("error")
	if unknown(err) {
		s.undo(u)
	}
}

func (s *Store) reenter(ctx context.Context, r AcquireRequest) (*Lease, error) {
	if !plausibleID(r.Lease) {
		s.count("not_held")
		return nil, ErrLeaseNotHeld
	}
	a := lua.AcquireArgs{Mode: "reenter", Lease: hashID(r.Lease), TTL: ms(r.TTL), By: r.By, Maker: tag()}
	if r.ModeGiven {
		a.Shared = lua.Flag(r.Shared)
	}
	if r.IdemKey != "" {
		secret, err := s.secret(ctx)
		if err != nil {
			return nil, err
		}
		a.Record, a.Body = recordHash(secret, r.By, r.IdemKey), r.BodyHash
	}
	// Sent once: a re-entry run twice would count twice.
	rep, err := s.run(ctx, call{op: s.ss.acquire, keys: []string{s.lockKey(r.Name)}, grant: true,
		args: func(notAfter string) []any { a.NotAfter = notAfter; return a.List() }})
	if err != nil {
		s.count("error")
		return nil, err
	}
	switch rep.code {
	case "reentered":
		s.count("reentered")
		return rep.lease(r.Name, r.Lease), nil
	case "not_held":
		s.count("not_held")
		return nil, ErrLeaseNotHeld
	case "mode_mismatch":
		s.count("mode_mismatch")
		return nil, ErrModeMismatch
	case "replayed":
		s.count("replayed")
		l := rep.lease(r.Name, r.Lease)
		l.replayed = true
		return l, nil
	case "idem_used":
		return nil, ErrIdempotencyUsed
	case "idem_mismatch":
		return nil, ErrIdempotencyMismatch
	default:
		return nil, unexpected("reenter", rep)
	}
}

func (s *Store) count(outcome string) { s.m.Acquires.WithLabelValues(outcome).Inc() }

// Lease returns a held lease. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Lease(ctx context.Context, l Ref) (*Lease, error) {
	if !plausibleID(l.ID) {
		return nil, ErrLeaseNotHeld
	}
	c := s.stateCall(l.Name, lua.StateArgs{Lease: hashID(l.ID), By: l.By})
	c.name = "lease"
	rep, err := s.run(ctx, c)
	if err != nil {
		return nil, err
	}
	switch rep.code {
	case "held":
		return rep.lease(l.Name, l.ID), nil
	case "not_held":
		return nil, ErrLeaseNotHeld
	default:
		return nil, unexpected("lease", rep)
	}
}

// Renew extends a held lease to ttl (0: the ttl of its last grant or renewal). It
// never revives a lease that ran out. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Renew(ctx context.Context, l Ref, ttl time.Duration) (*Lease, error) {
	if !plausibleID(l.ID) {
		return nil, ErrLeaseNotHeld
	}
	a := lua.RenewArgs{Lease: hashID(l.ID), TTL: ms(ttl), By: l.By}
	rep, err := s.run(ctx, call{op: s.ss.renew, keys: []string{s.lockKey(l.Name)}, again: true, grant: true,
		args: func(notAfter string) []any { a.NotAfter = notAfter; return a.List() }})
	if err != nil {
		return nil, err
	}
	switch rep.code {
	case "renewed":
		lease := rep.lease(l.Name, l.ID)
		s.capRenewed(ctx, l.By, l.Caps, lease)
		return lease, nil
	case "not_held":
		return nil, ErrLeaseNotHeld
	default:
		return nil, unexpected("renew", rep)
	}
}

// Release releases one hold of a lease. When its count reaches zero the hold ends
// and the lock is handed, in the same script, to the head live tickets that now
// fit. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Release(ctx context.Context, l Ref) (Release, error) {
	return s.release(ctx, l, false)
}

func (s *Store) release(ctx context.Context, l Ref, all bool) (Release, error) {
	if !plausibleID(l.ID) {
		return Release{}, ErrLeaseNotHeld
	}
	a := lua.ReleaseArgs{Lease: hashID(l.ID), By: l.By, All: all}
	// Sent once: a release of one hold run twice would release two.
	rep, err := s.run(ctx, call{op: s.ss.release, keys: []string{s.lockKey(l.Name)}, grant: true,
		args: func(notAfter string) []any { a.NotAfter = notAfter; return a.List() }})
	if err != nil {
		return Release{}, err
	}
	switch rep.code {
	case "released":
		if ss := rep.str(2); ss != "" {
			s.leaveSessionByHash(ss, rep.str(3)) // a session's hold released alone leaves the session
		}
		if rep.int(1) == 1 {
			s.capReleased(ctx, l)
		}
		return Release{Name: l.Name, Count: int(rep.int(0)), Released: rep.int(1) == 1}, nil
	case "not_held":
		return Release{}, ErrLeaseNotHeld
	default:
		return Release{}, unexpected("release", rep)
	}
}

// Force ends every hold of the lock, whoever holds it, and hands it to the head
// live tickets. It reports whether a hold was removed. Errors: ErrUnavailable.
func (s *Store) Force(ctx context.Context, name string) (bool, error) {
	// Sent once: a force run twice could end the next holder's hold too.
	rep, err := s.run(ctx, call{op: s.ss.force, keys: []string{s.lockKey(name)}, grant: true,
		args: func(notAfter string) []any { return lua.ForceArgs{NotAfter: notAfter}.List() }})
	if err != nil {
		return false, err
	}
	if rep.code != "forced" {
		return false, unexpected("force", rep)
	}
	return rep.int(0) > 0, nil
}

// State returns the lock's state. Errors: ErrUnavailable.
func (s *Store) State(ctx context.Context, name string) (State, error) {
	return s.state(ctx, name, 0)
}

// state returns the lock's state; watch > 0 tells Redis this process waits
// that long for news of it (announcements are published only while somebody
// waits).
func (s *Store) state(ctx context.Context, name string, watch time.Duration) (State, error) {
	rep, err := s.run(ctx, s.stateCall(name, lua.StateArgs{Watch: ms(watch)}))
	if err != nil {
		return State{}, err
	}
	if rep.code != "state" {
		return State{}, unexpected("state", rep)
	}
	return rep.lockState(name), nil
}

func (s *Store) stateCall(name string, a lua.StateArgs) call {
	return call{op: s.ss.state, keys: []string{s.lockKey(name)}, again: true, timeless: true,
		args: func(string) []any { return a.List() }}
}

// Cancel removes a ticket from the queue; a grant made to it and not yet claimed
// passes on. Errors: ErrTicketGone, ErrUnavailable.
func (s *Store) Cancel(ctx context.Context, t Ref) error {
	if !plausibleID(t.ID) {
		return ErrTicketGone
	}
	a := lua.CancelArgs{Ticket: hashID(t.ID), TicketLease: hashID(ticketLease(t.ID)), By: t.By}
	rep, err := s.run(ctx, call{op: s.ss.cancel, keys: []string{s.lockKey(t.Name)}, again: true,
		args: func(notAfter string) []any { a.NotAfter = notAfter; return a.List() }})
	if err != nil {
		return err
	}
	switch rep.code {
	case "cancelled":
		s.capCancelled(ctx, t, true)
		return nil
	case "gone":
		s.capCancelled(ctx, t, false)
		return ErrTicketGone
	default:
		return unexpected("cancel", rep)
	}
}

// pokeLock hands on a lock (or a slot of it) whose lease should have run out; it
// reports the time until the soonest hold ends when the lock is still held.
func (s *Store) pokeLock(ctx context.Context, name string) (bool, time.Duration, error) {
	rep, err := s.run(ctx, call{op: s.ss.poke, keys: []string{s.lockKey(name)}, again: true, timeless: true,
		args: func(string) []any { return lua.PokeArgs{}.List() }})
	if err != nil {
		return false, 0, err
	}
	if rep.code == "held" {
		return true, rep.ms(0), nil
	}
	return false, 0, nil
}
