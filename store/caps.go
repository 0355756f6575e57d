package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Caps on live objects. One principal (an API key) may have at most
// Caps.Holds holds, Caps.Tickets tickets and Caps.Sessions sessions in Redis
// at once, so that no key can fill the Redis every key shares. Each kind is
// counted where the objects live, in Redis: a sorted set per kind in the
// principal's own slot (P:u:{<principal id>}:h, :t and :s) of member ->
// deadline (Redis ms), the member being the hash Redis already knows the
// object by (its lease's, ticket's or session's; never an id).
//
//   - Admission: before a hold, ticket or session is asked for, one MULTI
//     prunes the members whose deadline has passed (ZREMRANGEBYSCORE), adds
//     the request's own member with a deadline no earlier than its object
//     could end (ZADD NX), makes the set expire no earlier than that, and
//     counts (ZCARD). Over the cap the member is taken out again and the
//     request refused (*CapError, before anything is made). A member that was
//     there already (a retry with the same Idempotency-Key) is counted once
//     and never refused, and keeps its deadline until the retry's answer
//     (a retry refused, as one with another body is, moves nothing); nor is
//     a fair retry whose request was granted (its hold is counted).
//     Admissions are exact against each other: a request in flight (one that
//     waits for a lock too) holds its place until its answer.
//   - The answer settles it: nothing made, the member is taken out; a hold
//     made, its member gets the hold's deadline (a fair request's ticket
//     member becomes its hold's).
//   - A renewal or re-entry moves the deadline (ZADD XX); a release that ends
//     the hold, a cancel, a session's end take members out (ZREM); a poll
//     moves its ticket's deadline past the poll, and a poll answered with the
//     lease moves the ticket to the holds. Expiry needs nothing: the next
//     admission prunes it.
//   - A set expires with its latest deadline (PEXPIREAT NX, then GT), so a
//     principal whose objects have all ended leaves nothing in Redis.
//
// Nothing spans slots atomically (Redis Cluster): these are calls of their
// own on the principal's slot, beside the lock's or session's script (calls
// to one slot, one round trip each). So the count can be off, briefly: by a
// key's requests in flight whose bookkeeping after the script failed (Redis
// trouble; a member then stays until its deadline, or goes at the deadline
// it had); by a hold ended by force, counted until its own deadline (force
// does not know whose holds it ends); on a cluster, by the skew between the
// lock's master's clock (the deadlines) and the principal's (the pruning).
// And a ticket granted while its key is at its hold cap still becomes a hold:
// a fair request is refused at the hold cap, but a ticket already queued is
// not taken back, so a key's holds stay below max_holds plus its tickets.
// Every member ends at its deadline whatever happened: nothing is off for
// long, and nothing stays behind.

// Caps bound what one principal may have in Redis at once; 0: no cap, and no
// bookkeeping (no Redis command) for that kind.
type Caps struct {
	Holds    int // holds: exclusive or shared, alone or in a session
	Tickets  int // tickets in a fair queue, until granted and claimed
	Sessions int // sessions
}

// The kinds a CapError names.
const (
	KindHolds    = "holds"
	KindTickets  = "tickets"
	KindSessions = "sessions"
)

// CapError is a request refused because its principal is at a cap.
type CapError struct {
	Kind  string // KindHolds, KindTickets or KindSessions
	Limit int    // the cap
	// RetryAfter is when the soonest of the principal's objects of that kind
	// ends by itself, at least a second and at most a minute from now (an
	// object may also end sooner: released, cancelled).
	RetryAfter time.Duration
}

func (e *CapError) Error() string { return fmt.Sprintf("cap of %d live %s reached", e.Limit, e.Kind) }

// Is makes errors.Is(err, ErrCapReached) true.
func (e *CapError) Is(target error) bool { return target == ErrCapReached }

const (
	// capSlack is added to a member's provisional deadline (its admission's
	// guess of the latest its object can end); a hold's real deadline within
	// capSettleSlack of that guess is left as guessed, saving a call.
	capSlack       = time.Second
	capSettleSlack = 2 * time.Second
	// capCallTimeout bounds one bookkeeping call.
	capCallTimeout = 2 * time.Second
	// The Retry-After of a refusal is between these.
	capRetryMin, capRetryMax = time.Second, time.Minute
)

// capKey is the principal's set of kind k ('h', 't' or 's'): in the slot of
// its id, apart from every lock's and session's.
func (s *Store) capKey(by string, k byte) string {
	return s.opt.Prefix + ":u:{" + by + "}:" + string(k)
}

// capNow is the estimated time (unix ms) of the Redis that holds key.
// Errors: ErrUnavailable when its clock cannot be estimated.
func (s *Store) capNow(ctx context.Context, key string) (int64, error) {
	st, err := s.stamp(ctx, key)
	if err != nil {
		return 0, err
	}
	na, err := strconv.ParseInt(st.notAfter, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("caps: %w", err)
	}
	return na - callBudget.Milliseconds(), nil
}

// capsExec sends fn's commands to the principal's slot (key is any of its
// sets) in one round trip, in a turn on a connection (admission.go; a wait
// for it past the queue's bounds is ErrOverloaded): as one MULTI/EXEC with tx
// (an admission: no other admission between its count and its add). The call
// does not end when the request's client goes away.
func (s *Store) capsExec(ctx context.Context, key string, tx bool, fn func(p redis.Pipeliner)) error {
	s.inFlight.RLock()
	defer s.inFlight.RUnlock()
	if s.closed {
		return fmt.Errorf("caps: store closed: %w", ErrUnavailable)
	}
	if s.opt.Gate.Down() {
		return fmt.Errorf("caps: %w: redis is down (health gate)", ErrUnavailable)
	}
	ctx = context.WithoutCancel(ctx)
	t := s.turnsFor(key)
	if err := t.enter(ctx); err != nil { // bounded by the queue's own bounds
		return fmt.Errorf("caps: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, capCallTimeout)
	defer cancel()
	f := func(p redis.Pipeliner) error { fn(p); return nil }
	var err error
	if tx {
		_, err = s.rdb.TxPipelined(ctx, f)
	} else {
		_, err = s.rdb.Pipelined(ctx, f)
	}
	t.leave(err == nil)
	if err != nil {
		return s.storeErr("caps", err)
	}
	return nil
}

// capTidy is capsExec for the bookkeeping after a script: best effort, since
// what it fixes ends at its deadline anyway.
func (s *Store) capTidy(ctx context.Context, key string, fn func(p redis.Pipeliner)) {
	if err := s.capsExec(ctx, key, false, fn); err != nil {
		s.opt.Logger.Debug().Err(err).Msg("caps: a count could not be updated; it is right again at the object's deadline")
	}
}

// capAdd adds (or moves) member with deadline d in key, and makes key expire
// no earlier: NX sets an expiry on a set that has none, GT extends one
// (GT alone would treat a set without expiry as never expiring).
func capAdd(ctx context.Context, p redis.Pipeliner, key, member string, d int64, args redis.ZAddArgs) {
	args.Members = []redis.Z{{Score: float64(d), Member: member}}
	p.ZAddArgs(ctx, key, args)
	capExpire(ctx, p, key, d)
}

func capExpire(ctx context.Context, p redis.Pipeliner, key string, d int64) {
	p.Do(ctx, "PEXPIREAT", key, d, "NX")
	p.Do(ctx, "PEXPIREAT", key, d, "GT")
}

// capRefusal takes the members an admission added back out of their sets and
// returns the *CapError for kind, its Retry-After from the soonest deadline
// in key (the refused kind's set).
func (s *Store) capRefusal(ctx context.Context, key string, now int64, kind string, limit int, added map[string]string) error {
	var first *redis.ZSliceCmd
	_ = s.capsExec(ctx, key, false, func(p redis.Pipeliner) {
		for k, m := range added {
			p.ZRem(ctx, k, m)
		}
		first = p.ZRangeWithScores(ctx, key, 0, 0)
	})
	retry := capRetryMin
	if first != nil && len(first.Val()) == 1 {
		retry = time.Duration(int64(first.Val()[0].Score)-now) * time.Millisecond
		retry = min(max(retry, capRetryMin), capRetryMax)
	}
	return &CapError{Kind: kind, Limit: limit, RetryAfter: retry}
}

// capAdmission is what an acquire's cap admission added, for its answer to settle.
type capAdmission struct {
	s      *Store
	r      AcquireRequest
	ids    requestIDs
	hk, tk string
	hold   bool  // the request's hold member was added (not a retry's, there already)
	ticket bool  // its ticket member was added
	retry  bool  // a retry: its member was there already, or (fair) its request's hold is
	provH  int64 // the hold member's provisional deadline (non-fair)
	provT  int64 // the ticket member's (fair)
}

// admitAcquire admits a new hold (or, fair, a ticket) under r.Caps. A
// non-fair request takes a place among the holds; a fair one among the
// tickets, and is refused when the holds are at their cap too (it would
// become one). It returns nil when r.Caps caps neither; errors: *CapError,
// ErrUnavailable.
func (s *Store) admitAcquire(ctx context.Context, r AcquireRequest, ids requestIDs) (*capAdmission, error) {
	c := r.Caps
	if c.Holds <= 0 && (!r.Fair || c.Tickets <= 0) {
		return nil, nil
	}
	a := &capAdmission{s: s, r: r, ids: ids, hk: s.capKey(r.By, 'h'), tk: s.capKey(r.By, 't')}
	now, err := s.capNow(ctx, a.hk)
	if err != nil {
		return nil, err
	}
	life := r.TTL
	if ids.session != "" {
		life = ids.remaining // a session's hold ends with the session
	}
	a.provH = now + ms(r.Wait+life+capSlack)
	a.provT = now + ms(r.Wait+s.opt.TicketTTL+capSlack)
	provT := a.provT
	cut := strconv.FormatInt(now, 10)
	var hAdd, hCard, tAdd, tCard *redis.IntCmd
	var granted *redis.FloatSliceCmd // a fair request's hold, when a retry's request was granted
	err = s.capsExec(ctx, a.hk, true, func(p redis.Pipeliner) {
		if c.Holds > 0 {
			p.ZRemRangeByScore(ctx, a.hk, "-inf", cut)
			if r.Fair && ids.ik != "" {
				granted = p.ZMScore(ctx, a.hk, ids.lh, ids.tlh) // 0: none
			}
			if !r.Fair {
				hAdd = p.ZAddArgs(ctx, a.hk, redis.ZAddArgs{NX: true, Members: []redis.Z{{Score: float64(a.provH), Member: ids.lh}}})
				capExpire(ctx, p, a.hk, a.provH)
			}
			hCard = p.ZCard(ctx, a.hk)
		}
		if r.Fair && c.Tickets > 0 {
			p.ZRemRangeByScore(ctx, a.tk, "-inf", cut)
			tAdd = p.ZAddArgs(ctx, a.tk, redis.ZAddArgs{NX: true, Members: []redis.Z{{Score: float64(provT), Member: ids.th}}})
			capExpire(ctx, p, a.tk, provT)
			tCard = p.ZCard(ctx, a.tk)
		}
	})
	if err != nil {
		return nil, err
	}
	a.hold = hAdd != nil && hAdd.Val() == 1
	a.ticket = tAdd != nil && tAdd.Val() == 1
	a.retry = (hAdd != nil && !a.hold) || (tAdd != nil && !a.ticket)
	if granted != nil {
		for _, d := range granted.Val() {
			a.retry = a.retry || d > 0
		}
	}
	added := map[string]string{}
	if a.hold {
		added[a.hk] = ids.lh
	}
	if a.ticket {
		added[a.tk] = ids.th
	}
	switch {
	case a.retry && r.Fair:
		// Its request was granted: the retry makes nothing (or, the hold
		// gone, nothing but what a fresh attempt would).
	case a.hold && hCard.Val() > int64(c.Holds):
		return nil, s.capRefusal(ctx, a.hk, now, KindHolds, c.Holds, added)
	case r.Fair && hCard != nil && hCard.Val() >= int64(c.Holds) && (tAdd == nil || a.ticket):
		return nil, s.capRefusal(ctx, a.hk, now, KindHolds, c.Holds, added)
	case a.ticket && tCard.Val() > int64(c.Tickets):
		return nil, s.capRefusal(ctx, a.tk, now, KindTickets, c.Tickets, added)
	}
	return a, nil
}

// settling wraps an acquire's answer f: the admission is settled first.
func (a *capAdmission) settling(ctx context.Context, f func(AcquireResult, error)) func(AcquireResult, error) {
	return func(res AcquireResult, err error) {
		a.settle(ctx, res, err)
		f(res, err)
	}
}

// settle brings the counts in line with what the acquire made: nothing (its
// members out), a ticket (its provisional deadline stands: the latest the
// ticket can live without a poll), or a hold (its deadline; a fair request's
// ticket member gives way to it).
func (a *capAdmission) settle(ctx context.Context, res AcquireResult, err error) {
	s, c := a.s, a.r.Caps
	switch {
	case err != nil || (res.Lease == nil && res.Ticket == nil):
		if a.hold || a.ticket {
			s.capTidy(ctx, a.hk, func(p redis.Pipeliner) {
				if a.hold {
					p.ZRem(ctx, a.hk, a.ids.lh)
				}
				if a.ticket {
					p.ZRem(ctx, a.tk, a.ids.th)
				}
			})
		}
	case res.Lease != nil && !a.r.Fair:
		d := res.Lease.ExpiresAt.UnixMilli()
		if !a.hold || d > a.provH || a.provH-d > capSettleSlack.Milliseconds() { // a retry's member has the first's deadline
			s.capTidy(ctx, a.hk, func(p redis.Pipeliner) { capAdd(ctx, p, a.hk, hashID(res.Lease.ID), d, redis.ZAddArgs{}) })
		}
	case res.Lease != nil:
		d := res.Lease.ExpiresAt.UnixMilli()
		s.capTidy(ctx, a.hk, func(p redis.Pipeliner) {
			if c.Tickets > 0 {
				p.ZRem(ctx, a.tk, a.ids.th)
			}
			if c.Holds > 0 {
				capAdd(ctx, p, a.hk, hashID(res.Lease.ID), d, redis.ZAddArgs{})
			}
		})
	case res.Ticket != nil && !a.ticket && c.Tickets > 0:
		// A retry waited on the ticket: it lives at least as long as this
		// request's admission guessed.
		s.capTidy(ctx, a.hk, func(p redis.Pipeliner) { capAdd(ctx, p, a.tk, a.ids.th, a.provT, redis.ZAddArgs{GT: true}) })
	}
}

// capRenewed moves a renewed (or re-entered) hold's deadline.
func (s *Store) capRenewed(ctx context.Context, by string, c Caps, l *Lease) {
	if c.Holds <= 0 || l == nil {
		return
	}
	hk := s.capKey(by, 'h')
	s.capTidy(ctx, hk, func(p redis.Pipeliner) {
		d := l.ExpiresAt.UnixMilli()
		p.ZAddArgs(ctx, hk, redis.ZAddArgs{XX: true, Members: []redis.Z{{Score: float64(d), Member: hashID(l.ID)}}})
		p.Do(ctx, "PEXPIREAT", hk, d, "GT")
	})
}

// capReleased takes a hold that ended out of the count.
func (s *Store) capReleased(ctx context.Context, l Ref) {
	if l.Caps.Holds <= 0 {
		return
	}
	s.capTidy(ctx, s.capKey(l.By, 'h'), func(p redis.Pipeliner) { p.ZRem(ctx, s.capKey(l.By, 'h'), hashID(l.ID)) })
}

// capCancelled takes a ticket out of the count, and with ended the grant it
// had, which the cancel ended.
func (s *Store) capCancelled(ctx context.Context, t Ref, ended bool) {
	c := t.Caps
	if c.Tickets <= 0 && (c.Holds <= 0 || !ended) {
		return
	}
	s.capTidy(ctx, s.capKey(t.By, 't'), func(p redis.Pipeliner) {
		if c.Tickets > 0 {
			p.ZRem(ctx, s.capKey(t.By, 't'), hashID(t.ID))
		}
		if c.Holds > 0 && ended {
			p.ZRem(ctx, s.capKey(t.By, 'h'), hashID(ticketLease(t.ID)))
		}
	})
}

// capPolling moves a polled ticket's deadline to the latest it can live if
// this poll, waiting wait, is its last (raising it only: another poll may be
// in flight).
func (s *Store) capPolling(ctx context.Context, t Ref, wait time.Duration) {
	if t.Caps.Tickets <= 0 {
		return
	}
	tk := s.capKey(t.By, 't')
	now, err := s.capNow(ctx, tk)
	if err != nil {
		return
	}
	d := now + ms(wait+s.opt.TicketTTL+capSlack)
	s.capTidy(ctx, tk, func(p redis.Pipeliner) {
		p.ZAddArgs(ctx, tk, redis.ZAddArgs{XX: true, GT: true, Members: []redis.Z{{Score: float64(d), Member: hashID(t.ID)}}})
		p.Do(ctx, "PEXPIREAT", tk, d, "GT")
	})
}

// pollSettling wraps a poll's answer f: a ticket granted moves from the
// tickets to the holds, a ticket gone leaves the tickets.
func (s *Store) pollSettling(ctx context.Context, t Ref, f func(PollResult, error)) func(PollResult, error) {
	c := t.Caps
	if c.Tickets <= 0 && c.Holds <= 0 {
		return f
	}
	return func(res PollResult, err error) {
		gone := errors.Is(err, ErrTicketGone)
		if (res.Lease != nil && err == nil) || gone {
			s.capTidy(ctx, s.capKey(t.By, 't'), func(p redis.Pipeliner) {
				if c.Tickets > 0 {
					p.ZRem(ctx, s.capKey(t.By, 't'), hashID(t.ID))
				}
				if c.Holds > 0 && !gone {
					capAdd(ctx, p, s.capKey(t.By, 'h'), hashID(ticketLease(t.ID)), res.Lease.ExpiresAt.UnixMilli(), redis.ZAddArgs{})
				}
			})
		}
		f(res, err)
	}
}

// admitSession admits a new session (its id's hash sh, living ttl) under
// c.Sessions; nil when uncapped. Errors: *CapError, ErrUnavailable.
func (s *Store) admitSession(ctx context.Context, r SessionRequest, sh string) (*sessionAdmission, error) {
	if r.Caps.Sessions <= 0 {
		return nil, nil
	}
	a := &sessionAdmission{s: s, sk: s.capKey(r.By, 's'), sh: sh}
	now, err := s.capNow(ctx, a.sk)
	if err != nil {
		return nil, err
	}
	a.prov = now + ms(r.TTL+capSlack)
	var add, card *redis.IntCmd
	err = s.capsExec(ctx, a.sk, true, func(p redis.Pipeliner) {
		p.ZRemRangeByScore(ctx, a.sk, "-inf", strconv.FormatInt(now, 10))
		add = p.ZAddArgs(ctx, a.sk, redis.ZAddArgs{NX: true, Members: []redis.Z{{Score: float64(a.prov), Member: sh}}})
		capExpire(ctx, p, a.sk, a.prov)
		card = p.ZCard(ctx, a.sk)
	})
	if err != nil {
		return nil, err
	}
	a.added = add.Val() == 1
	if a.added && card.Val() > int64(r.Caps.Sessions) {
		return nil, s.capRefusal(ctx, a.sk, now, KindSessions, r.Caps.Sessions, map[string]string{a.sk: sh})
	}
	return a, nil
}

// sessionAdmission is what a session's admission added.
type sessionAdmission struct {
	s      *Store
	sk, sh string
	added  bool
	prov   int64
}

// settle brings the count in line with what CreateSession made.
func (a *sessionAdmission) settle(ctx context.Context, sess Session, err error) {
	if a == nil {
		return
	}
	switch {
	case err != nil:
		if a.added {
			a.s.capTidy(ctx, a.sk, func(p redis.Pipeliner) { p.ZRem(ctx, a.sk, a.sh) })
		}
	default:
		d := sess.ExpiresAt.UnixMilli()
		if !a.added || d > a.prov || a.prov-d > capSettleSlack.Milliseconds() { // a retry's member has the first's deadline
			a.s.capTidy(ctx, a.sk, func(p redis.Pipeliner) { capAdd(ctx, p, a.sk, a.sh, d, redis.ZAddArgs{}) })
		}
	}
}

// capSessionRenewed moves a renewed session's deadline, and its holds'.
func (s *Store) capSessionRenewed(ctx context.Context, ref Ref, sess Session, holds []SessionHold) {
	c := ref.Caps
	if c.Sessions <= 0 && (c.Holds <= 0 || len(holds) == 0) {
		return
	}
	d := sess.ExpiresAt.UnixMilli()
	s.capTidy(ctx, s.capKey(ref.By, 's'), func(p redis.Pipeliner) {
		if c.Sessions > 0 {
			sk := s.capKey(ref.By, 's')
			p.ZAddArgs(ctx, sk, redis.ZAddArgs{XX: true, Members: []redis.Z{{Score: float64(d), Member: hashID(ref.ID)}}})
			p.Do(ctx, "PEXPIREAT", sk, d, "GT")
		}
		if c.Holds > 0 && len(holds) > 0 {
			hk := s.capKey(ref.By, 'h')
			zs := make([]redis.Z, len(holds))
			for i, h := range holds {
				zs[i] = redis.Z{Score: float64(d), Member: hashID(h.Lease)}
			}
			p.ZAddArgs(ctx, hk, redis.ZAddArgs{XX: true, Members: zs})
			p.Do(ctx, "PEXPIREAT", hk, d, "GT")
		}
	})
}

// capSessionEnded takes an ended session out of the count, with every hold
// and ticket its members could have made.
func (s *Store) capSessionEnded(ctx context.Context, ref Ref, members []string) {
	c := ref.Caps
	if c.Sessions <= 0 && ((c.Holds <= 0 && c.Tickets <= 0) || len(members) == 0) {
		return
	}
	var holds, tickets []any
	for _, m := range members {
		nonce, _, ok := strings.Cut(m, ":")
		if !ok {
			continue
		}
		tid := sessionTicket(ref.ID, nonce)
		holds = append(holds, hashID(sessionLease(ref.ID, nonce)), hashID(ticketLease(tid)))
		tickets = append(tickets, hashID(tid))
	}
	s.capTidy(ctx, s.capKey(ref.By, 's'), func(p redis.Pipeliner) {
		if c.Sessions > 0 {
			p.ZRem(ctx, s.capKey(ref.By, 's'), hashID(ref.ID))
		}
		if c.Holds > 0 && len(holds) > 0 {
			p.ZRem(ctx, s.capKey(ref.By, 'h'), holds...)
		}
		if c.Tickets > 0 && len(tickets) > 0 {
			p.ZRem(ctx, s.capKey(ref.By, 't'), tickets...)
		}
	})
}
