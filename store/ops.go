package store

import (
	"context"
	"time"
)

// Acquire grants the lock, re-enters a held lease (r.Lease set), or, with r.Fair,
// queues a ticket when the lock is not granted within r.Wait. A non-fair request
// that is not granted within r.Wait returns a *HeldError (ErrLockHeld) and leaves
// no trace in Redis. Other errors: ErrLeaseNotHeld (re-entry), ErrTooManyWaiters,
// ErrUnavailable.
func (s *Store) Acquire(ctx context.Context, r AcquireRequest) (AcquireResult, error) {
	if r.Lease != "" {
		l, err := s.reenter(ctx, r)
		return AcquireResult{Lease: l, Reentered: l != nil}, err
	}
	if ctx.Err() != nil { // nothing is created for a client already gone
		return AcquireResult{}, clientGone("acquire", ctx)
	}
	id := newID()
	lh := hashID(id)
	keys := s.keys(r.Name)
	mode := "new"
	var tid, th, tlh string
	if r.Fair && (r.Wait <= 0 || s.shuttingDown()) {
		// No wait: queue in the same call. With a wait, the first call only tries;
		// the ticket is made once this process has a waiter slot for it.
		tid = newID()
		th, tlh = hashID(tid), hashID(ticketLease(tid))
		keys = append(keys, s.ticketKey(r.Name, th))
		mode = "fair"
	} else {
		keys = append(keys, keys[0])
	}
	made := undo{name: r.Name, lh: lh, th: th, tlh: tlh}
	// Retried when the connection breaks: the script knows its own lease and
	// ticket hashes, so a second run answers the first one's grant or ticket
	// instead of leaving a lock held by a lease nobody was told of.
	rep, err := s.runGrant(ctx, s.acquire, "acquire", keys, true,
		lh, ms(r.TTL), r.Owner, mode, th, tlh, ms(s.opt.TicketTTL), 0)
	if err != nil {
		s.failed(made, err)
		return AcquireResult{}, err
	}
	switch rep.code {
	case "granted", "queued", "ticket_granted":
		if ctx.Err() != nil {
			s.dropGrant(made)
			return AcquireResult{}, clientGone("acquire", ctx)
		}
	}
	switch rep.code {
	case "granted":
		s.count("granted")
		return AcquireResult{Lease: rep.lease(r.Name, id)}, nil
	case "queued":
		s.count("queued")
		return AcquireResult{Ticket: rep.ticket(r.Name, tid)}, nil
	case "ticket_granted":
		s.count("granted")
		return AcquireResult{Lease: rep.lease(r.Name, ticketLease(tid))}, nil
	case "busy":
		held := rep.held()
		if r.Wait <= 0 || s.shuttingDown() {
			s.count("held")
			return AcquireResult{}, held
		}
		if r.Fair {
			return s.waitFair(ctx, r, id)
		}
		l, err := s.waitLock(ctx, r, id, held)
		return AcquireResult{Lease: l}, err
	default:
		return AcquireResult{}, unexpected("acquire", rep)
	}
}

func (s *Store) reenter(ctx context.Context, r AcquireRequest) (*Lease, error) {
	if !plausibleID(r.Lease) {
		s.count("not_held")
		return nil, ErrLeaseNotHeld
	}
	keys := append(s.keys(r.Name), s.keys(r.Name)[0])
	rep, err := s.runGrant(ctx, s.acquire, "reenter", keys, false,
		hashID(r.Lease), ms(r.TTL), r.Owner, "reenter", "", "", 0, 0)
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
	default:
		return nil, unexpected("reenter", rep)
	}
}

func (s *Store) count(outcome string) { s.m.Acquires.WithLabelValues(outcome).Inc() }

// Lease returns a held lease. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Lease(ctx context.Context, name, lease string) (*Lease, error) {
	if !plausibleID(lease) {
		return nil, ErrLeaseNotHeld
	}
	rep, err := s.run(ctx, s.state, "lease", s.keys(name), true, hashID(lease))
	if err != nil {
		return nil, err
	}
	switch rep.code {
	case "held":
		return rep.lease(name, lease), nil
	case "not_held":
		return nil, ErrLeaseNotHeld
	default:
		return nil, unexpected("lease", rep)
	}
}

// Renew extends a held lease to ttl (0: the ttl of its last grant or renewal). It
// never revives a lease that ran out. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Renew(ctx context.Context, name, lease string, ttl time.Duration) (*Lease, error) {
	if !plausibleID(lease) {
		return nil, ErrLeaseNotHeld
	}
	rep, err := s.runGrant(ctx, s.renew, "renew", s.keys(name), true, hashID(lease), ms(ttl))
	if err != nil {
		return nil, err
	}
	switch rep.code {
	case "renewed":
		return rep.lease(name, lease), nil
	case "not_held":
		return nil, ErrLeaseNotHeld
	default:
		return nil, unexpected("renew", rep)
	}
}

// Release releases one hold. At zero holds the lock is freed, or handed to the head
// live ticket in the same script. Errors: ErrLeaseNotHeld, ErrUnavailable.
func (s *Store) Release(ctx context.Context, name, lease string) (Release, error) {
	if !plausibleID(lease) {
		return Release{}, ErrLeaseNotHeld
	}
	rep, err := s.runGrant(ctx, s.release, "release", s.keys(name), false, hashID(lease))
	if err != nil {
		return Release{}, err
	}
	switch rep.code {
	case "released":
		return Release{Name: name, Count: int(rep.int(0)), Released: rep.int(1) == 1}, nil
	case "not_held":
		return Release{}, ErrLeaseNotHeld
	default:
		return Release{}, unexpected("release", rep)
	}
}

// Force frees the lock whoever holds it and hands it to the head live ticket. It
// reports whether a holder was removed. Errors: ErrUnavailable.
func (s *Store) Force(ctx context.Context, name string) (bool, error) {
	rep, err := s.runGrant(ctx, s.force, "force", s.keys(name), false)
	if err != nil {
		return false, err
	}
	if rep.code != "forced" {
		return false, unexpected("force", rep)
	}
	return rep.int(0) == 1, nil
}

// State returns the lock's state. Errors: ErrUnavailable.
func (s *Store) State(ctx context.Context, name string) (State, error) {
	rep, err := s.run(ctx, s.state, "state", s.keys(name), true, "")
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
func (s *Store) Cancel(ctx context.Context, name, ticket string) error {
	if !plausibleID(ticket) {
		return ErrTicketGone
	}
	th := hashID(ticket)
	keys := append(s.keys(name), s.ticketKey(name, th))
	rep, err := s.run(ctx, s.cancel, "cancel", keys, false, th)
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

// pokeLock hands on a lock whose lease should have run out; it reports the
// remaining lease when the lock is still held.
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
