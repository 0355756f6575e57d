package store

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"
)

// An abandoned request is one whose client went away, or whose call to Redis
// failed without a definite answer (a timeout, a broken connection: the script
// may have run, or may still run once Redis reads it). Whatever it may have been
// granted would be a hold nobody knows, blocking the lock for its whole ttl; so
// the cleaner undoes it in the background, retrying until Redis answers:
// abandon.lua frees the hold (handing the lock on) and cancels the ticket, and
// leaves a tombstone that makes the request's own script grant nothing should
// it run later; unpoll.lua turns a ticket poll's grant back into one kept for
// the ticket's owner, who knows the ticket and may poll again.

// tombstoneTTL is how long an abandoned request's tombstone lasts when its
// calls carried no "not after" (the store had no estimate of the Redis clock
// yet): longer than a command already sent can take to reach Redis and run
// once Redis reads its connection again. With a deadline, the tombstone lasts
// until that deadline and no longer.
const tombstoneTTL = 30 * time.Second

// maxUndos bounds the cleaner's backlog. Only requests in flight when Redis
// stops answering end up there, a few per connection of the pool and timeout.
const maxUndos = 10000

type undo struct {
	name    string
	lh      string // the request's own lease hash; "" for a ticket poll
	th, tlh string // its ticket and the ticket's lease hash, if any
	poll    bool   // a ticket poll: unpoll rather than abandon
	pid     string // that poll's id
	by      string // the principal of the request
	until   string // the "not after" (clock.go) of the request's latest call: its tombstone lasts until then
	tomb    bool   // the request's script may still run: leave a tombstone
	keep    bool   // an idempotent request: its client recovers it; nothing to undo
	// scoped: an idempotent request undone all the same (echoed): only what it
	// made itself (its record's nonce) ends, and its tombstone stops only its
	// own copies, not a fresh request with the same key
	scoped    bool
	nonce, ik string
	since     time.Time
}

type cleaner struct {
	mu      sync.Mutex
	pending []undo
	closed  bool // the cleaner has stopped: whoever queues an undo runs it
	wake    chan struct{}
	ctx     context.Context // ends when the cleaner is told to stop
	stop    context.CancelFunc
	stopped chan struct{}

	// requests counts the requests under way that may queue an undo (Acquire,
	// Poll); Close waits for them before the cleaner's last pass (track).
	requests sync.WaitGroup
}

func newCleaner() *cleaner {
	ctx, stop := context.WithCancel(context.Background())
	return &cleaner{wake: make(chan struct{}, 1), ctx: ctx, stop: stop, stopped: make(chan struct{})}
}

// undo queues u for the cleaner; once the cleaner has stopped (Close), it runs
// u itself, for at most closeUndoWait: an undo left in a queue nobody reads
// would leave its hold for its whole ttl, known to nobody.
func (s *Store) undo(u undo) {
	if u.keep && !u.scoped {
		return
	}
	u.since = time.Now()
	if u.until == "" { // no earlier than the deadline of any call the request made
		u.until = s.notAfter(s.lockKey(u.name))
	}
	c := s.clean
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), closeUndoWait)
		defer cancel()
		s.undoAll(ctx, []undo{u})
		return
	}
	if len(c.pending) >= maxUndos {
		c.pending = c.pending[1:]
		s.m.Undos.WithLabelValues("dropped").Inc()
		s.opt.Logger.Error().Int("backlog", maxUndos).Msg("abandoned-request backlog full: dropped the oldest; a hold it may have left lasts until its ttl")
	}
	c.pending = append(c.pending, u)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// track counts a request that may queue an undo until the returned func is
// called. Once the store is closed it counts nothing: every call of the
// request is refused before anything is sent, so it has nothing to undo.
func (s *Store) track() (done func()) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.closed {
		return func() {}
	}
	s.clean.requests.Add(1)
	return s.clean.requests.Done
}

// awaitRequests waits, until deadline at the latest, for the requests track
// counted: once the store is closed they end at once (Shutdown ended their
// waits, and every call is refused), having queued any undo they need.
func (s *Store) awaitRequests(deadline time.Time) {
	ended := make(chan struct{})
	go func() {
		s.clean.requests.Wait()
		close(ended)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ended:
	case <-t.C:
	}
}

// runCleaner undoes queued requests until stopCleaner; each is retried, with a
// pause growing to a second while Redis does not answer, until it gets an
// answer. stopCleaner makes the last pass itself.
func (s *Store) runCleaner() {
	c := s.clean
	defer close(c.stopped)
	var retry <-chan time.Time
	pause := time.Duration(0)
	for {
		select {
		case <-c.wake:
		case <-retry:
		case <-c.ctx.Done():
			return
		}
		if s.cleanOnce(c.ctx) > 0 {
			pause = min(max(2*pause, 50*time.Millisecond), time.Second)
			retry = time.After(pause)
		} else {
			pause, retry = 0, nil
		}
	}
}

// cleanOnce tries every queued undo once and returns how many are left.
func (s *Store) cleanOnce(ctx context.Context) int {
	c := s.clean
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	var failed []undo
	for _, u := range batch {
		if ctx.Err() != nil || s.runUndo(ctx, u) != nil {
			failed = append(failed, u)
		}
	}
	c.mu.Lock()
	c.pending = append(failed, c.pending...)
	n := len(c.pending)
	c.mu.Unlock()
	return n
}

func (s *Store) runUndo(ctx context.Context, u undo) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	keys := s.keys(u.name)
	if u.th != "" {
		keys = append(keys, s.ticketKey(u.name, u.th))
	} else {
		keys = append(keys, keys[0])
	}
	var v []any
	var err error
	if u.poll {
		until := ""
		if u.tomb {
			until = cmp.Or(u.until, "0")
		}
		v, err = s.unpoll.Run(ctx, s.scr, keys, u.th, u.tlh, ms(s.opt.TicketTTL), u.pid, u.by, until).Slice()
	} else {
		tomb := int64(0)
		if u.tomb {
			tomb = ms(tombstoneTTL)
		}
		nonce, ik := "", ""
		if u.scoped {
			nonce, ik = u.nonce, u.ik
		}
		v, err = s.abandon.Run(ctx, s.scr, keys, u.lh, u.th, u.tlh, tomb, u.until, nonce, ik).Slice()
	}
	if err != nil {
		s.m.RedisErrors.Inc()
		s.clusterErr(err)
		return err
	}
	rep, err := decodeReply(v)
	if err != nil {
		return err
	}
	what := rep.code
	if len(rep.v) > 0 {
		what = rep.str(0)
	}
	s.m.Undos.WithLabelValues(what).Inc()
	return nil
}

// stopCleaner stops the cleaner and then, for at most wait, undoes what is
// left: its backlog, and whatever was queued while it stopped. Undos queued
// after that are run by undo itself.
func (s *Store) stopCleaner(wait time.Duration) {
	c := s.clean
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c.stop()
	<-c.stopped
	c.mu.Lock()
	c.closed = true
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	s.undoAll(ctx, batch)
}

// undoAll runs the undos until each has an answer, pausing (up to a second)
// between rounds while Redis does not answer, until ctx ends; it logs how many
// were left.
func (s *Store) undoAll(ctx context.Context, batch []undo) {
	pause := 50 * time.Millisecond
	for len(batch) > 0 {
		var failed []undo
		for _, u := range batch {
			if ctx.Err() != nil || s.runUndo(ctx, u) != nil {
				failed = append(failed, u)
			}
		}
		batch = failed
		if len(batch) == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			s.opt.Logger.Error().Int("left", len(batch)).Msg("shutting down with abandoned requests not undone: Redis did not answer; their holds last until their ttl")
			return
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// errExpired: a call reached Redis after its "not after" deadline and changed
// nothing (clock.go); definite, so nothing is undone.
var errExpired = errors.New("call reached the store too late")
