package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Session is a server session that NewSession made and keeps alive: many holds,
// one heartbeat. Holds taken in it (Session.Lock, or LockOptions.Session) last
// as long as it does and are renewed with it; Close releases them all. Its
// methods are safe for concurrent use.
type Session struct {
	c  *Client
	id string

	k     keeper // its life; k.mu guards info and holds too
	info  SessionInfo
	holds map[*Hold]struct{}
}

// NewSession makes a session and renews it in the background at a third of
// its ttl, until Close or until it is lost (Session.Lost). ctx bounds the
// making only. The request carries an Idempotency-Key (o's, or a fresh one)
// and a lost answer is retried with it. Errors: those of CreateSession.
//
// A renewal that answers 404 loses the session and every hold in it; one that
// fails for a passing reason is retried while the session lasts, as a Hold's
// is. After each renewal the session checks that its holds are all still in it
// (one of them may have been taken by force) and marks the missing ones lost.
func (c *Client) NewSession(ctx context.Context, o SessionOptions) (*Session, error) {
	if o.IdempotencyKey == "" {
		o.IdempotencyKey = NewIdempotencyKey()
	}
	info, err := c.CreateSession(ctx, o)
	if err != nil {
		return nil, err
	}
	got := time.Now()
	s := &Session{c: c, id: info.ID, info: *info, holds: map[*Hold]struct{}{}, k: newKeeper("session")}
	c.mu.Lock()
	if c.sessions == nil {
		c.sessions = map[string]*Session{}
	}
	c.sessions[s.id] = s
	c.mu.Unlock()
	s.k.start(got, info.TTL, s.renew, s.markLost)
	return s, nil
}

// liveSession is the Session of id that NewSession made on c, or nil.
func (c *Client) liveSession(id string) *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}

func (c *Client) forgetSession(s *Session) {
	c.mu.Lock()
	if c.sessions[s.id] == s {
		delete(c.sessions, s.id)
	}
	c.mu.Unlock()
}

// ID is the session id, a bearer secret (LockOptions.Session).
func (s *Session) ID() string { return s.id }

// Info is the session as the server last described it (without its holds).
func (s *Session) Info() SessionInfo {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	return s.info
}

// Lost is closed when the session is lost: a renewal answered that it is not
// there (it ran out, or was ended elsewhere), or renewals kept failing until it
// ran out. Every hold in it is lost with it. Close does not close it.
func (s *Session) Lost() <-chan struct{} { return s.k.lost }

// Err is nil while the session lives or after Close, and once it is lost, an
// error matching ErrLost that wraps the cause.
func (s *Session) Err() error { return s.k.failure() }

// Lock takes the lock name in the session, as Client.Lock does with
// o.Session set to the session's id (o.TTL must be 0: the hold lasts as long
// as the session). Errors: those of Client.Lock; ErrLost or ErrReleased when
// the session is lost or closed.
func (s *Session) Lock(ctx context.Context, name string, o LockOptions) (*Hold, error) {
	o.Session = s.id
	return s.c.lock(ctx, name, o, s)
}

// Close stops the renewal and ends the session, releasing every hold in it
// completely (whatever its count) and cancelling its tickets. Its holds are
// released (Unlock on them answers ErrReleased); their Lost channels stay open.
// Errors: one matching ErrLost when the session was lost before; ErrReleased on
// a second Close; or the request's error (renewal has stopped anyway, so the
// session and its holds then end with its ttl).
func (s *Session) Close(ctx context.Context) error {
	if err := s.k.beginRelease(); errors.Is(err, ErrLost) {
		return fmt.Errorf("close: %w", err)
	} else if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	err := s.c.retry(ctx, func(again bool) error {
		err := s.c.once(ctx, request{method: http.MethodDelete, target: sessionPath(s.id)})
		if again && errors.Is(err, ErrSessionNotFound) {
			return nil // the lost answer was the end of it
		}
		return err
	})
	s.c.forgetSession(s)
	holds := s.snapshot()
	err = s.k.endRelease(err, ErrSessionNotFound)
	for _, h := range holds {
		if err == nil {
			h.markReleased()
		} else {
			h.markLost(fmt.Errorf("its session could not be closed, and is no longer renewed: %w", err))
		}
	}
	if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// renew renews the session once, then checks its holds.
func (s *Session) renew(ctx context.Context) (time.Duration, error) {
	holds := s.snapshot()
	info, err := s.c.RenewSession(ctx, s.id, 0)
	if err != nil {
		return 0, err
	}
	_ = s.k.whileHeld(func() { s.info = *info })
	for _, h := range holds {
		h.setExpiry(info.TTL, info.ExpiresAt)
	}
	if info.Locks != len(holds) {
		s.checkHolds(ctx, holds)
	}
	return info.TTL, nil
}

// checkHolds marks lost the holds that are no longer in the session. If the
// session cannot be read now, the next renewal looks again.
func (s *Session) checkHolds(ctx context.Context, holds []*Hold) {
	d, err := s.c.GetSession(ctx, s.id)
	if err != nil {
		return
	}
	in := make(map[string]bool, len(d.Holds))
	for _, sh := range d.Holds {
		in[sh.Lease] = true
	}
	for _, h := range holds {
		if !in[h.id] {
			h.markLost(fmt.Errorf("%w: no longer in its session (taken by force, or released elsewhere)", ErrLeaseNotHeld))
		}
	}
}

// usable is nil while holds may be taken in the session.
func (s *Session) usable() error { return s.whileOpen(nil) }

// track adds h to the session, unless the session is no longer held.
func (s *Session) track(h *Hold) error { return s.whileOpen(func() { s.holds[h] = struct{}{} }) }

// whileOpen runs f (if not nil) under the session's mutex while it is held;
// otherwise it returns why it is not: its loss, or ErrReleased.
func (s *Session) whileOpen(f func()) error {
	err := s.k.whileHeld(f)
	if err != nil && !errors.Is(err, ErrLost) {
		return fmt.Errorf("session: %w", err)
	}
	return err
}

func (s *Session) forget(h *Hold) {
	s.k.mu.Lock()
	delete(s.holds, h)
	s.k.mu.Unlock()
}

func (s *Session) snapshot() []*Hold {
	s.k.mu.Lock()
	defer s.k.mu.Unlock()
	hs := make([]*Hold, 0, len(s.holds))
	for h := range s.holds {
		hs = append(hs, h)
	}
	return hs
}

// markLost marks a live session lost, with every hold in it.
func (s *Session) markLost(cause error) {
	err := s.k.markLost(cause)
	if err == nil {
		return
	}
	s.c.forgetSession(s)
	for _, h := range s.snapshot() {
		h.markLost(err)
	}
}
