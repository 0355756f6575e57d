package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/batonhq/baton/lua"
)

// requestIDs are the ids an acquire is made under: its lease, and its ticket
// should it queue (a fair request). The lease id is random (the one random id
// of a request) and the ticket's derived from it;
// for an idempotent request both are derived from the principal, the lock and
// the Idempotency-Key with the store's secret, so that a retry (or a
// concurrent duplicate) lands on the same hold or ticket. A hold asked for in
// a session has ids derived from the session id and a nonce (itself derived
// from the key when there is one), so the session finds it.
type requestIDs struct {
	lease, ticket string
	lh, th, tlh   string // hashes of the lease, the ticket and the ticket's lease
	ik            string // the idempotency record's hash; "" without a key
	mk            string // the maker: this request, in each of its attempts ("" without a key: its lease is its own)
	pid           string // names the request's own wait on its ticket

	member    string        // the session member ("<nonce>:<name>"); "" without a session
	session   string        // the session id
	remaining time.Duration // the session's remaining time when the member joined
	joined    time.Time
}

func (s *Store) requestIDs(ctx context.Context, r AcquireRequest) (requestIDs, error) {
	var ids requestIDs
	if r.IdemKey != "" {
		// Requests with one key share its hold's lease: the maker id tells
		// them apart. Without a key the lease is the request's own ("").
		ids.mk = tag()
	}
	if r.Fair {
		ids.pid = tag() // names the request's own wait on its ticket
	}
	var base string
	if r.IdemKey != "" {
		secret, err := s.secret(ctx)
		if err != nil {
			return ids, err
		}
		base = derive(secret, "acquire", r.By, r.Name, r.IdemKey)
		ids.ik = recordHash(secret, r.By, r.IdemKey)
	}
	switch {
	case r.Session != "":
		nonce := base
		if nonce == "" {
			nonce = newID()
		}
		ids.lease, ids.ticket = sessionLease(r.Session, nonce), sessionTicket(r.Session, nonce)
		ids.member, ids.session = nonce+":"+r.Name, r.Session
		// Pending while the acquire may run: its wait, and the worst a call takes.
		remaining, err := s.joinSession(ctx, Ref{ID: r.Session, By: r.By}, ids.member, r.Wait+WorstCall)
		if errors.Is(err, ErrSessionNotFound) && ids.ik != "" && s.recordExists(ctx, r.Name, ids.ik) {
			// A retry of a request that made a hold in a session since ended: what
			// the key made has ended (409), not "no such session" (404).
			return ids, ErrIdempotencyUsed
		}
		if err != nil {
			return ids, err
		}
		ids.remaining, ids.joined = remaining, time.Now()
	case base != "":
		ids.lease, ids.ticket = subID(base, "lease"), subID(base, "ticket")
	default:
		ids.lease = newID()
		if r.Fair { // (a request that never queues needs no ticket)
			ids.ticket = subID(ids.lease, "ticket")
		}
	}
	ids.lh = hashID(ids.lease)
	if ids.ticket != "" {
		ids.th, ids.tlh = hashID(ids.ticket), hashID(ticketLease(ids.ticket))
	}
	return ids, nil
}

// args are acquire.lua's ARGV for r in mode, waiting poll on its ticket (fair)
// or wait for news when busy (new).
func (s *Store) acquireArgs(r AcquireRequest, ids requestIDs, mode string, poll, wait time.Duration) func(string) []any {
	a := lua.AcquireArgs{Mode: mode, Lease: ids.lh, TTL: ms(r.TTL), Owner: r.Owner, By: r.By, Shared: lua.Flag(r.Shared),
		Limit: strconv.Itoa(r.Limit), Maker: ids.mk, Ticket: ids.th, TicketLease: ids.tlh, TicketTTL: ms(s.opt.TicketTTL),
		Poll: ms(poll), PollID: ids.pid, Wait: ms(wait), Record: ids.ik, Body: r.BodyHash}
	if ids.ik == "" {
		a.Body = ""
	}
	if ids.session != "" {
		a.Session, a.Member = hashID(ids.session), ids.member
	}
	return func(notAfter string) []any {
		a.NotAfter = notAfter
		if ids.member != "" {
			a.Remaining = strconv.FormatInt(ms(ids.remaining-time.Since(ids.joined)), 10)
		}
		return a.List()
	}
}

// undo is what undoing this request touches: its hold, and its ticket, which
// nobody can learn when the request has no key (dropped), while with a key its
// client can, by retrying (only this request's wait is taken out).
func (ids requestIDs) undo(r AcquireRequest) undo {
	u := undo{name: r.Name, lh: ids.lh, th: ids.th, tlh: ids.tlh, mk: ids.mk, pid: ids.pid, by: r.By, ik: ids.ik}
	if r.Fair {
		u.ticket = "drop"
		if ids.ik != "" {
			u.ticket = "poll"
		}
	}
	return u
}

// recordExists reports whether the lock has an Idempotency-Key record ik.
func (s *Store) recordExists(ctx context.Context, name, ik string) bool {
	n, err := s.rdb.Exists(ctx, s.lockKey(name)+":i:"+ik).Result()
	return err == nil && n == 1
}
