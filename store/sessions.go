package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/lua"
)

// Sessions: many holds, one heartbeat. A session lives in its own slot
// (P:s:{S}, S the SHA-256 of its id) with the members it made (lua/
// session_lib.lua); its holds live in their locks' slots, so nothing here is
// atomic across locks: the session's script runs first (it is renewed, or
// ended, and names its members), then each lock's script, pipelined. A crash
// in between leaves holds that end at the session's deadline, which they share;
// a member whose hold is gone is forgotten by the next renewal or look.

// SessionRequest asks for a session.
type SessionRequest struct {
	TTL      time.Duration
	Owner    string
	By       string // the principal; the session is bound to it
	IdemKey  string // an Idempotency-Key: a retry gets the same session
	BodyHash string
	Caps     Caps // the principal's caps (caps.go): a session past Caps.Sessions is refused
}

// Session is a session, and (from GetSession) the holds in it.
type Session struct {
	ID        string
	TTL       time.Duration // the ttl it was made or last renewed with
	Remaining time.Duration // by the Redis server's clock
	ExpiresAt time.Time
	Owner     string
	Locks     int           // holds in it
	Holds     []SessionHold // from GetSession only
}

// SessionHold is one hold of a session.
type SessionHold struct {
	Name   string
	Lease  string // the lease id: the session's owner may act on the hold directly
	Fence  int64
	Count  int
	Shared bool
}

func (s *Store) sessionKeys(id string) []string {
	k := s.opt.Prefix + ":s:{" + hashID(id) + "}"
	return []string{k, k + ":h"}
}

// CreateSession makes a session. With an Idempotency-Key, the id is derived from
// it, so a retry gets the first request's session (replayed). Errors:
// a *CapError (ErrCapReached) past r.Caps.Sessions, ErrIdempotencyUsed,
// ErrIdempotencyMismatch, ErrUnavailable.
func (s *Store) CreateSession(ctx context.Context, r SessionRequest) (Session, bool, error) {
	id := newID()
	if r.IdemKey == "" {
		r.BodyHash = "" // remembered only for an Idempotency-Key
	} else {
		secret, err := s.secret(ctx)
		if err != nil {
			return Session{}, false, err
		}
		id = derive(secret, "session", r.By, r.IdemKey)
	}
	adm, err := s.admitSession(ctx, r, hashID(id)) // nil, at no cost, when r.Caps caps no sessions
	if err != nil {
		return Session{}, false, err
	}
	sess, replayed, err := s.createSession(ctx, r, id)
	adm.settle(ctx, sess, err)
	return sess, replayed, err
}

func (s *Store) createSession(ctx context.Context, r SessionRequest, id string) (Session, bool, error) {
	rep, err := s.sessionRun(ctx, s.ss.sessionCreate, s.sessionKeys(id),
		lua.SessionCreateArgs{By: r.By, TTL: ms(r.TTL), Owner: r.Owner, Body: r.BodyHash, Nonce: newID()}.List())
	if err != nil {
		return Session{}, false, err
	}
	switch rep.code {
	case "created":
		return rep.session(id), false, nil
	case "replayed":
		sess := rep.session(id)
		sess.Locks = len(rep.members())
		return sess, true, nil
	case "idem_used":
		return Session{}, false, ErrIdempotencyUsed
	case "idem_mismatch":
		return Session{}, false, ErrIdempotencyMismatch
	default:
		return Session{}, false, unexpected("session create", rep)
	}
}

// GetSession returns a live session with its holds. Errors: ErrSessionNotFound,
// ErrUnavailable.
func (s *Store) GetSession(ctx context.Context, ref Ref) (Session, error) {
	if !plausibleID(ref.ID) {
		return Session{}, ErrSessionNotFound
	}
	rep, err := s.sessionRun(ctx, s.ss.sessionGet, s.sessionKeys(ref.ID), lua.SessionByArgs{By: ref.By}.List())
	if err != nil {
		return Session{}, err
	}
	if rep.code != "session" {
		return Session{}, ErrSessionNotFound
	}
	sess := rep.session(ref.ID)
	sess.Holds, err = s.sessionHoldsOp(ctx, ref, "look", 0, rep.members())
	sess.Locks = len(sess.Holds)
	return sess, err
}

// RenewSession extends a session and every hold in it to ttl (0: its last ttl);
// a ticket of the session will be granted until the new deadline. With visible
// set, only the holds on names it allows are renewed (the others are left to run
// out: their key's grant no longer covers them). Errors: ErrSessionNotFound,
// ErrUnavailable.
func (s *Store) RenewSession(ctx context.Context, ref Ref, ttl time.Duration, visible func(name string) bool) (Session, error) {
	if !plausibleID(ref.ID) {
		return Session{}, ErrSessionNotFound
	}
	rep, err := s.sessionRun(ctx, s.ss.sessionRenew, s.sessionKeys(ref.ID), lua.SessionRenewArgs{By: ref.By, TTL: ms(ttl)}.List())
	if err != nil {
		return Session{}, err
	}
	if rep.code != "renewed" {
		return Session{}, ErrSessionNotFound
	}
	sess := rep.session(ref.ID)
	members := rep.members()
	if visible != nil {
		members = slices.DeleteFunc(members, func(m string) bool {
			_, name, _ := strings.Cut(m, ":")
			return !visible(name)
		})
	}
	holds, err := s.sessionHoldsOp(ctx, ref, "renew", sess.TTL, members)
	sess.Locks = len(holds)
	s.capSessionRenewed(ctx, ref, sess, holds)
	return sess, err
}

// EndSession ends a session: every hold in it is released whatever its count
// (each lock handed to its queue) and its tickets are cancelled. It returns how
// many holds it released. A DELETE cut short (a 503) may be sent again: the
// session stays ended, with its members, until its holds are released. Errors:
// ErrSessionNotFound, ErrUnavailable.
func (s *Store) EndSession(ctx context.Context, ref Ref) (int, error) {
	if !plausibleID(ref.ID) {
		return 0, ErrSessionNotFound
	}
	rep, err := s.sessionRun(ctx, s.ss.sessionEnd, s.sessionKeys(ref.ID), lua.SessionByArgs{By: ref.By}.List())
	if err != nil {
		return 0, err
	}
	if rep.code != "ended" {
		return 0, ErrSessionNotFound
	}
	ended, err := s.sessionHoldsOp(ctx, ref, "end", 0, rep.members())
	if err != nil {
		return 0, err
	}
	if _, err := s.sessionRun(ctx, s.ss.sessionFinish, s.sessionKeys(ref.ID), lua.SessionByArgs{By: ref.By}.List()); err != nil {
		return 0, err
	}
	s.capSessionEnded(ctx, ref, rep.members())
	return len(ended), nil
}

// joinSession adds a member before its hold is asked for, pending for at most
// pending, and returns the session's remaining time. Errors:
// ErrSessionNotFound, ErrUnavailable.
func (s *Store) joinSession(ctx context.Context, ref Ref, member string, pending time.Duration) (time.Duration, error) {
	if !plausibleID(ref.ID) {
		return 0, ErrSessionNotFound
	}
	rep, err := s.sessionRun(ctx, s.ss.sessionJoin, s.sessionKeys(ref.ID),
		lua.SessionJoinArgs{By: ref.By, Member: member, Pending: ms(pending)}.List())
	if err != nil {
		return 0, err
	}
	if rep.code != "joined" {
		return 0, ErrSessionNotFound
	}
	return rep.ms(0), nil
}

// sessionAlive reports whether the request's session still lives (true when
// Redis cannot tell: the session's holds share its deadline anyway).
func (s *Store) sessionAlive(ctx context.Context, r AcquireRequest) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	rep, err := s.sessionRun(ctx, s.ss.sessionCheck, s.sessionKeys(r.Session), lua.SessionByArgs{By: r.By}.List())
	return err != nil || rep.code == "alive"
}

// leaveSessionByHash takes a member out of the session with hash ss, for a hold
// released alone; a failure leaves it for the next renewal or look to forget.
func (s *Store) leaveSessionByHash(ss, member string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	k := s.opt.Prefix + ":s:{" + ss + "}"
	_, _ = s.sessionRun(ctx, s.ss.sessionLeave, []string{k, k + ":h"}, lua.SessionLeaveArgs{How: "now", Members: []string{member}}.List())
}

// sessionRun runs a session script (on the session's own slot). Those take no
// "not after": each is harmless when a copy of it runs late (a session made
// that nobody learns of ends at its ttl), so one whose outcome is unknown is
// sent again at once.
func (s *Store) sessionRun(ctx context.Context, op *scriptOp, keys []string, args []any) (reply, error) {
	return s.run(ctx, call{op: op, keys: keys, again: true, timeless: true, args: func(string) []any { return args }})
}

// sessionMember is a parsed member: its nonce and lock name.
type sessionMember struct{ raw, nonce, name string }

// sessionHoldsOp runs session_holds.lua's op on every member, one call per lock,
// pipelined, and returns the holds still held (sorted by lock name); members
// found gone are forgotten.
func (s *Store) sessionHoldsOp(ctx context.Context, ref Ref, op string, ttl time.Duration, members []string) ([]SessionHold, error) {
	byLock := map[string][]sessionMember{}
	var names []string
	for _, m := range members {
		nonce, name, ok := strings.Cut(m, ":")
		if !ok {
			continue
		}
		if _, seen := byLock[name]; !seen {
			names = append(names, name)
		}
		byLock[name] = append(byLock[name], sessionMember{raw: m, nonce: nonce, name: name})
	}
	sort.Strings(names)
	// The pipeline is sent once (never retried), so it gets one attempt's budget
	// (its write and read timeouts) in all: a stalled node, and go-redis's
	// handling of it (marking it failing, reloading the slot map), never hold
	// the answer past that (TestSessionWithAHoldOnAStalledShardAnswersWithinWorstCall).
	ctx, cancel := context.WithTimeout(ctx, WorstCall/2)
	defer cancel()
	// One call per lock, all in one pipeline (split by node on a cluster).
	keys, args := make([][]string, len(names)), make([][]any, len(names))
	for i, name := range names {
		st, err := s.stamp(ctx, s.lockKey(name))
		if err != nil {
			return nil, err
		}
		a := lua.SessionHoldsArgs{NotAfter: st.notAfter, Op: op, By: ref.By, TTL: max(ttl.Milliseconds(), 0)}
		for _, m := range byLock[name] {
			tid := sessionTicket(ref.ID, m.nonce)
			a.Members = append(a.Members, lua.MemberHashes{Lease: hashID(sessionLease(ref.ID, m.nonce)),
				Ticket: hashID(tid), TicketLease: hashID(ticketLease(tid))})
		}
		keys[i], args[i] = []string{s.lockKey(name)}, a.List()
	}
	cmds := s.execPipelined(ctx, s.ss.sessionHolds, keys, args)
	var holds []SessionHold
	var gone []string
	for i, name := range names {
		v, err := cmds[i].Slice()
		if err != nil {
			return holds, s.storeErr("session holds", err)
		}
		if r, _ := decodeReply(v); r.code == "expired" {
			return holds, fmt.Errorf("session holds: %w: %w", ErrUnavailable, errExpired)
		}
		rep, err := decodeReply(v)
		if err != nil || rep.code != "holds" {
			return holds, fmt.Errorf("session holds: unexpected reply %q: %v", rep.code, err)
		}
		for j, m := range byLock[name] {
			state := rep.str(4 * j)
			switch state {
			case "held", "held_ticket":
				lease := sessionLease(ref.ID, m.nonce)
				if state == "held_ticket" {
					lease = ticketLease(sessionTicket(ref.ID, m.nonce))
				}
				holds = append(holds, SessionHold{Name: name, Lease: lease, Fence: rep.int(4*j + 1),
					Count: int(rep.int(4*j + 2)), Shared: rep.int(4*j+3) == 1})
			case "gone":
				gone = append(gone, m.raw)
			}
		}
	}
	if len(gone) > 0 && op != "end" {
		args := lua.SessionLeaveArgs{How: "pruned", Members: gone}.List()
		if _, err := s.sessionRun(ctx, s.ss.sessionLeave, s.sessionKeys(ref.ID), args); err != nil {
			return holds, fmt.Errorf("session: forget gone holds: %w", err)
		}
	}
	return holds, nil
}
