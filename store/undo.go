package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/lua"
)

// An undo ends what a request made when its answer did not reach its client
// (the client went away, or the outcome of its call stayed unknown), unless
// somebody was told of it (lua/undo.lua). It runs only once the request's
// calls are past their "not after" (calls.go), so no copy of them can run
// after it; it ends only what that request made (its maker id, its poll id).
// Each undo runs on its own, retried until Redis answers: one that stalls
// delays no other.

// maxUndos bounds the undos under way. Only requests in flight when Redis
// stops answering end up there, a few per connection of the pool and timeout.
const maxUndos = 10000

// closeUndoWait bounds how long Close waits for undos to end.
const closeUndoWait = 5 * time.Second

// undo is what undoing one request touches.
type undo struct {
	name string
	lh   string // the request's own lease hash: its hold ends (unless told)
	th   string // its ticket's hash, and the lease hash that ticket is granted under
	tlh  string
	// ticket: what becomes of the ticket: "drop" (nobody can ever learn it:
	// the ticket and its grant end unless told), "poll" (its owner knows it:
	// only this request's poll pid is taken out), or "" (nothing).
	ticket string
	mk     string // the request's maker id
	pid    string // its poll id
	by     string // its principal
	ik     string // its Idempotency-Key record hash
}

// undoer runs the undos, each on a goroutine of its own.
type undoer struct {
	n     atomic.Int64
	wg    sync.WaitGroup
	stop  chan struct{} // closed once Close gave up waiting for the undos
	once  sync.Once
	track sync.WaitGroup // requests under way that may queue an undo (Store.track)
}

func newUndoer() *undoer { return &undoer{stop: make(chan struct{})} }

// undo ends what u names, in the background.
func (s *Store) undo(u undo) {
	if s.undos.n.Add(1) > maxUndos {
		s.undos.n.Add(-1)
		s.m.Undos.WithLabelValues("dropped").Inc()
		s.opt.Logger.Error().Int("undos", maxUndos).Msg("too many undos under way: dropped one; a hold it would have ended lasts until its ttl")
		return
	}
	s.undos.wg.Add(1)
	go func() {
		defer s.undos.wg.Done()
		defer s.undos.n.Add(-1)
		s.runUndo(u)
	}()
}

// runUndo runs u until Redis answers, pausing (up to a second) between
// tries, or until Close stops waiting.
func (s *Store) runUndo(u undo) {
	pause := 50 * time.Millisecond
	for {
		// No deadline: the call's attempt is bounded by the client's
		// timeouts, and its wait for a turn by the queue's (a shorter one
		// would have it give up, and start again at the back, whenever calls
		// queue longer: under a steady load it would never run).
		what, err := s.undoOnce(context.Background(), u)
		if err == nil {
			s.m.Undos.WithLabelValues(what).Inc()
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-s.undos.stop:
			t.Stop()
			s.opt.Logger.Error().Msg("shut down with an undo Redis did not answer: a hold it would have ended lasts until its ttl")
			return
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

func (s *Store) undoOnce(ctx context.Context, u undo) (string, error) {
	rep, err := s.tries(ctx, call{op: s.ss.undo, keys: []string{s.lockKey(u.name)}, timeless: true,
		args: func(string) []any {
			return lua.UndoArgs{Mode: u.ticket, Lease: u.lh, Ticket: u.th, TicketLease: u.tlh, Maker: u.mk, PollID: u.pid,
				By: u.by, TicketTTL: ms(s.opt.TicketTTL), Record: u.ik}.List()
		}})
	if err != nil {
		return "", err
	}
	return rep.str(0), nil
}

// track counts a request that may queue an undo until the returned func is
// called. Once the store is closed it counts nothing: every call of the
// request is refused before anything is sent, so it has nothing to undo.
func (s *Store) track() (done func()) {
	s.inFlight.RLock()
	defer s.inFlight.RUnlock()
	if s.closed {
		return func() {}
	}
	s.undos.track.Add(1)
	return s.undos.track.Done
}

// awaitUndos waits, until deadline at the latest, for the requests track
// counted (once the store is closed they end at once, having queued any undo
// they need) and then for the undos; past the deadline the undos stop.
func (s *Store) awaitUndos(deadline time.Time) {
	done := make(chan struct{})
	go func() {
		s.undos.track.Wait()
		s.undos.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.undos.once.Do(func() { close(s.undos.stop) })
	}
}
