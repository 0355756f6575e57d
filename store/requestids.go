package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"time"
)

// requestIDs are the ids an acquire is made under: its lease, and its ticket
// should it queue. They are random, or, for an idempotent request, derived from
// the principal, the lock and the Idempotency-Key with the store's secret, so
// that a retry (or a concurrent duplicate) lands on the same hold or ticket. A
// hold asked for in a session has ids derived from the session id and a nonce
// (itself derived from the key when there is one), so the session finds it.
type requestIDs struct {
	lease, ticket string
	lh, th, tlh   string // hashes of the lease, the ticket and the ticket's lease
	ik            string // the idempotency record's hash; "" without a key
	pid           string // names the request's own wait on its ticket (keep_ticket)

	member    string        // the session member ("<nonce>:<name>"); "" without a session
	session   string        // the session id
	nonce     string        // the same for every attempt of this request (acquire.lua ARGV 17)
	remaining time.Duration // the session's remaining time when the member joined
	joined    time.Time
}

func (s *Store) requestIDs(ctx context.Context, r AcquireRequest) (requestIDs, error) {
	var ids requestIDs
	var base string
	if r.IdemKey != "" {
		secret, err := s.secret(ctx)
		if err != nil {
			return ids, err
		}
		base = derive(secret, "acquire", r.By, r.Name, r.IdemKey)
		ids.ik = recordHash(r.By, r.IdemKey)
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
		remaining, err := s.joinSession(ctx, Ref{ID: r.Session, By: r.By}, ids.member, r.Wait+callBudget)
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
		ids.lease, ids.ticket = newID(), newID()
	}
	ids.lh, ids.th, ids.tlh = hashID(ids.lease), hashID(ids.ticket), hashID(ticketLease(ids.ticket))
	ids.pid = newID()[:11]
	ids.nonce = newID()
	return ids, nil
}

// keys are the acquire script's keys: the lock's three and the ticket's.
func (ids requestIDs) keys(s *Store, name string) []string {
	return append(s.keys(name), s.ticketKey(name, ids.th))
}

// undo is what undoing this request touches. An idempotent request is never
// undone: its client recovers what it made by retrying with its key.
func (ids requestIDs) undo(name string) undo {
	return undo{name: name, lh: ids.lh, th: ids.th, tlh: ids.tlh, keep: ids.ik != "", nonce: ids.nonce, ik: ids.ik}
}

// subID is an id derived from base for one use.
func subID(base, use string) string {
	sum := sha256.Sum256([]byte(use + ":" + base))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// recordExists reports whether the lock has an Idempotency-Key record ik.
func (s *Store) recordExists(ctx context.Context, name, ik string) bool {
	n, err := s.rdb.Exists(ctx, s.keys(name)[0]+":i:"+ik).Result()
	return err == nil && n == 1
}
