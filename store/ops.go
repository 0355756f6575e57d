package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Acquire grants a hold (exclusive, or shared with r.Shared), re-enters a held
// lease (r.Lease set), or, with r.Fair, queues a ticket when the lock is not
// granted within r.Wait. A non-fair request that is not granted within r.Wait
// returns a *HeldError (ErrLockHeld) and leaves no trace in Redis. With
// r.IdemKey, what the first request with that key made is answered again
// (Replayed). With r.Session, the hold joins the session and lasts as long.
// Other errors: ErrLeaseNotHeld and ErrModeMismatch (re-entry), a *LimitError
// (ErrLimitMismatch), ErrIdempotencyUsed, ErrIdempotencyMismatch,
// ErrSessionNotFound, ErrTooManyWaiters, ErrUnavailable.
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
	if ids.member == "" {
		s.acquire1(ctx, r, ids, f)
		return
	}
	u := ids.undo(r.Name)
	s.acquire1(ctx, r, ids, func(res AcquireResult, err error) {
		if (res.Lease != nil || res.Ticket != nil) && !s.sessionAlive(ctx, r) {
			// The session ended (a DELETE) between the member joining and the grant:
			// what was made for it must not outlive it.
			u.keep = false
			s.undo(u)
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

func (s *Store) acquire1(ctx context.Context, r AcquireRequest, ids requestIDs, f func(AcquireResult, error)) {
	mode := "new"
	if r.Fair && (r.Wait <= 0 || s.shuttingDown()) {
		// No wait: queue in the same call. With a wait, the first call only tries;
		// the ticket is made once this process has a waiter slot for it.
		mode = "fair"
	}
	made := ids.undo(r.Name)
	args := s.acquireArgs(r, ids, ids.lh, mode, 0)
	made.until = notAfterOf(args)
	// Retried when the connection breaks: the script knows its own lease and
	// ticket hashes, so a second run answers the first one's grant or ticket
	// instead of leaving a lock held by a lease nobody was told of.
	rep, err := s.runCall(ctx, s.acquire, "acquire", ids.keys(s, r.Name), true, true, args...)
	if err != nil {
		s.failed(made, err)
		f(AcquireResult{}, err)
		return
	}
	if res, err, done := s.settled(ctx, r, ids, rep); done {
		if rep.echo && !made1(rep.code) {
			s.echoed(made, err)
		}
		f(res, err)
		return
	}
	switch rep.code {
	case "busy":
		held := rep.held()
		if r.Wait <= 0 || s.shuttingDown() {
			s.count("held")
			if rep.echo {
				s.echoed(made, held)
			}
			f(AcquireResult{}, held)
			return
		}
		if r.Fair {
			s.waitFair(ctx, r, ids, rep.echo, f)
			return
		}
		s.waitLock(ctx, r, ids, held, rep.echo, f)
	default:
		f(AcquireResult{}, unexpected("acquire", rep))
	}
}

// settled turns every acquire reply but 'busy' into its result; done is false
// for 'busy'. A grant or ticket made for a client that has gone is undone.
func (s *Store) settled(ctx context.Context, r AcquireRequest, ids requestIDs, rep reply) (AcquireResult, error, bool) {
	switch rep.code {
	case "granted", "queued", "ticket_granted":
		if ctx.Err() != nil {
			s.dropGrant(ids.undo(r.Name))
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
	case "abandoned":
		s.count("error")
		return AcquireResult{}, fmt.Errorf("acquire: abandoned before it ran: %w", ErrUnavailable), true
	}
	return AcquireResult{}, nil, false
}

// made1 reports an acquire reply that made (or found) something for its client:
// whatever a copy of its call does later, that copy finds it (or, once it has
// ended, its tombstone), and settled undoes it when its client has gone.
func made1(code string) bool {
	switch code {
	case "granted", "queued", "ticket_granted", "replayed", "replayed_ticket", "replayed_queued":
		return true
	}
	return false
}

// echoed undoes a request that ends with nothing made for its client (busy,
// refused, a wait that ran out) while a call of it was answered only by a
// retry (reply.echo): its first attempt may still reach Redis and grant the
// lock, under a lease nobody will ever be told of. As for an abandoned
// request, the undo frees whatever that copy granted already, and its
// tombstone stops the copy should it come later.
func (s *Store) echoed(u undo, answer error) {
	if u.keep {
		// An idempotent request told it got nothing (423, 409 limit) may never
		// try again: undone only as far as it made something itself (scoped).
		// Told anything else (503, gone), its client recovers what it made by
		// retrying with its key.
		var limit *LimitError
		if !errors.Is(answer, ErrLockHeld) && !errors.As(answer, &limit) {
			return
		}
		u.scoped = u.nonce != ""
	}
	u.tomb = true
	u.until = "" // the undo's own: no earlier than any call the request made
	s.undo(u)
}

// notAfterOf is the "not after" (ARGV 15) of acquire.lua's args.
func notAfterOf(args []any) string { return args[14].(string) }

// acquireArgs are acquire.lua's ARGV for r under lease hash lh.
func (s *Store) acquireArgs(r AcquireRequest, ids requestIDs, lh, mode string, poll time.Duration) []any {
	shared := "0"
	if r.Shared {
		shared = "1"
	}
	if mode == "reenter" && !r.ModeGiven {
		shared = ""
	}
	remaining := ""
	if ids.member != "" {
		remaining = strconv.FormatInt(ms(ids.remaining-time.Since(ids.joined)), 10)
	}
	ss := ""
	if ids.session != "" {
		ss = hashID(ids.session)
	}
	return []any{lh, ms(r.TTL), r.Owner, mode, ids.th, ids.tlh, ms(s.opt.TicketTTL), ms(poll), r.By, shared,
		strconv.Itoa(r.Limit), ids.ik, r.BodyHash, remaining, s.notAfter(s.lockKey(r.Name)), ids.pid, ids.nonce, ss, ids.member}
}

func (s *Store) reenter(ctx context.Context, r AcquireRequest) (*Lease, error) {
	if !plausibleID(r.Lease) {
		s.count("not_held")
		return nil, ErrLeaseNotHeld
	}
	keys := append(s.keys(r.Name), s.lockKey(r.Name))
	ids := requestIDs{nonce: newID()}
	if r.IdemKey != "" {
		ids.ik = recordHash(r.By, r.IdemKey)
	}
	rep, err := s.runGrant(ctx, s.acquire, "reenter", keys, false, s.acquireArgs(r, ids, hashID(r.Lease), "reenter", 0)...)
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
	rep, err := s.run(ctx, s.state, "lease", s.keys(l.Name), true, hashID(l.ID), l.By)
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
	rep, err := s.runGrant(ctx, s.renew, "renew", s.keys(l.Name), true, hashID(l.ID), ms(ttl), l.By)
	if err != nil {
		return nil, err
	}
	switch rep.code {
	case "renewed":
		return rep.lease(l.Name, l.ID), nil
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
	return s.release1(ctx, l, false)
}

func (s *Store) release1(ctx context.Context, l Ref, all bool) (Release, error) {
	if !plausibleID(l.ID) {
		return Release{}, ErrLeaseNotHeld
	}
	whole := "0"
	if all {
		whole = "1"
	}
	rep, err := s.runGrant(ctx, s.release, "release", s.keys(l.Name), false, hashID(l.ID), l.By, whole)
	if err != nil {
		return Release{}, err
	}
	switch rep.code {
	case "released":
		if ss := rep.str(2); ss != "" {
			s.leaveSessionByHash(ss, rep.str(3)) // a session's hold released alone leaves the session
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
	rep, err := s.runGrant(ctx, s.force, "force", s.keys(name), false)
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
	rep, err := s.run(ctx, s.state, "state", s.keys(name), true, "", "")
	if err != nil {
		return State{}, err
	}
	if rep.code != "state" {
		return State{}, unexpected("state", rep)
	}
	return rep.lockState(name), nil
}

// Cancel removes a ticket from the queue; a grant made to it and not yet claimed
// passes on. Errors: ErrTicketGone, ErrUnavailable.
func (s *Store) Cancel(ctx context.Context, t Ref) error {
	if !plausibleID(t.ID) {
		return ErrTicketGone
	}
	th := hashID(t.ID)
	keys := append(s.keys(t.Name), s.ticketKey(t.Name, th))
	rep, err := s.run(ctx, s.cancel, "cancel", keys, false, th, hashID(ticketLease(t.ID)), t.By)
	if err != nil {
		return err
	}
	switch rep.code {
	case "cancelled":
		return nil
	case "gone":
		return ErrTicketGone
	default:
		return unexpected("cancel", rep)
	}
}

// pokeLock hands on a lock (or a slot of it) whose lease should have run out; it
// reports the time until the soonest hold ends when the lock is still held.
func (s *Store) pokeLock(ctx context.Context, name string) (bool, time.Duration, error) {
	rep, err := s.run(ctx, s.poke, "poke", s.keys(name), true)
	if err != nil {
		return false, 0, err
	}
	if rep.code == "held" {
		return true, rep.ms(0), nil
	}
	return false, 0, nil
}
