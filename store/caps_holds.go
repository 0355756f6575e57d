package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The caps on holds and tickets: admitting an acquire, and following what
// it made through renewals, releases, cancels and polls (see caps.go).

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
