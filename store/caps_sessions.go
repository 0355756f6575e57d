package store

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The cap on sessions: admitting a new session, and following it through
// renewals and its end (see caps.go).

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
