package store

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/metrics"
)

// Admission. A burst of requests (a fleet that wakes at once) makes more
// script calls at a time than the client has connections. Left to go-redis,
// the extra calls wait in its pool, and one that waits past the pool timeout
// fails as if Redis were down; one that waits long enough after it was
// stamped reaches Redis past its "not after" and is refused too. So every
// script call takes a turn first: at most one fewer than the pool's
// connections are in flight at a time (the last is left to the clock, the
// readiness probe and the listings), and the others wait in a FIFO queue, not
// yet stamped, so that a call's deadline starts only once it is on its way.
//
// The queue is bounded, in length (MaxQueuedCalls) and in time
// (MaxQueueWait): a call past either is refused before anything is sent, with
// ErrOverloaded, unless no call at all got an answer from Redis while it
// waited: then Redis is not answering, and it is ErrUnavailable. A request
// that may wait anyway (a long-poll, WithPatience) lets its calls wait for a
// turn until its own wait ends, if that is later: the first try of a wait
// must not fail because a burst of others came with it. Once the store shuts
// down that patience ends: such a call still waiting is refused
// (ErrUnavailable, as every long-poll then answers at once).
//
// A request waiting for a turn keeps its goroutine, and an HTTP request its
// connection's buffers too: during a burst, thousands of them. InTurn lets a
// long-poll wait without either: while calls queue, it keeps the request's
// start in a list (a closure) and runs it once few calls wait, so the server
// can park the connection first.
//
// On a cluster each master has its own turns and queue (the length bound is
// the sum of all of them).

// DefaultMaxQueuedCalls and DefaultMaxQueueWait are the queue's bounds when
// Options leave them zero.
const (
	DefaultMaxQueuedCalls = 50000
	DefaultMaxQueueWait   = 10 * time.Second
)

type patienceKey struct{}

// WithPatience returns ctx marked as a request's that may wait until until
// anyway (a long-poll): a call made on it may wait for its turn on a Redis
// connection until then, when that is later than MaxQueueWait from now.
func WithPatience(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, patienceKey{}, until)
}

// queuedKey marks a context InTurn kept waiting: its first call has been
// waiting since then.
type queuedKey struct{}

type queuedAt struct {
	at    time.Time
	taken atomic.Bool // by the request's first call
}

// admission is the store's turns, per Redis, and the requests InTurn keeps.
type admission struct {
	m        *metrics.Metrics
	inFlight int // turns per Redis
	maxQueue int64
	maxWait  time.Duration
	queued   atomic.Int64    // calls waiting for a turn, all queues together
	stop     <-chan struct{} // closed when the store shuts down

	mu    sync.Mutex
	byRed map[string]*turns // "" on one Redis; a master's address on a cluster

	lmu     sync.Mutex
	later   *list.List   // of *kept, oldest first (InTurn)
	running atomic.Int64 // kept requests started and not yet past their first call
}

// turns is one Redis's turns: the calls in flight on its connections, and
// the queue of those waiting for one.
type turns struct {
	a     *admission
	mu    sync.Mutex
	free  int        // turns not taken
	queue *list.List // of *turnWaiter, oldest first
	// answered is the unix nanoseconds of the latest attempt that got a reply
	// (any reply): while it moves, Redis is answering, and a long queue is
	// this process's own load.
	answered atomic.Int64
}

type turnWaiter struct {
	ready    chan struct{} // closed when the turn is given
	admitted bool          // guarded by turns.mu
}

// kept is a request InTurn keeps until few calls wait.
type kept struct {
	ctx   context.Context
	f     func(context.Context)
	el    *list.Element
	timer *time.Timer
}

func newAdmission(rdb redis.UniversalClient, maxQueue int, maxWait time.Duration, m *metrics.Metrics, stop <-chan struct{}) *admission {
	pool := 0
	switch c := rdb.(type) {
	case *redis.Client:
		pool = c.Options().PoolSize
	case *redis.ClusterClient:
		pool = c.Options().PoolSize
	}
	if pool <= 0 {
		pool = 10
	}
	a := &admission{m: m, inFlight: max(pool-1, 1), maxQueue: int64(maxQueue), maxWait: maxWait, stop: stop,
		byRed: map[string]*turns{}, later: list.New()}
	goLabelled(labelAdmission, func() {
		<-stop
		a.runAllKept()
	})
	return a
}

func (a *admission) stopped() bool {
	select {
	case <-a.stop:
		return true
	default:
		return false
	}
}

// queueWait is how long a call made on ctx may wait for its turn, and
// whether that is longer than MaxQueueWait (the request's patience).
func (a *admission) queueWait(ctx context.Context) (time.Duration, bool) {
	if until, ok := ctx.Value(patienceKey{}).(time.Time); ok && !a.stopped() {
		if d := time.Until(until); d > a.maxWait {
			return d, true
		}
	}
	return a.maxWait, false
}

// of is the turns of the Redis at addr.
func (a *admission) of(addr string) *turns {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.byRed[addr]
	if t == nil {
		t = &turns{a: a, free: a.inFlight, queue: list.New()}
		t.answered.Store(time.Now().UnixNano())
		a.byRed[addr] = t
	}
	return t
}

// turnsFor is the turns of the Redis that holds key.
func (s *Store) turnsFor(key string) *turns {
	if s.topo == nil {
		return s.adm.of("")
	}
	return s.adm.of(s.topo.Master(key))
}

// enter waits for a turn. Errors (nothing was sent): ErrOverloaded when the
// queue is full, or the wait passes its bound (or ctx's deadline) while Redis
// answers others; ErrUnavailable when it passes it with no answer from Redis
// meanwhile, or when ctx is cancelled (the client went away).
func (t *turns) enter(ctx context.Context) error {
	a := t.a
	since := time.Now()
	bound, patient := a.queueWait(ctx)
	if q, ok := ctx.Value(queuedKey{}).(*queuedAt); ok && q.taken.CompareAndSwap(false, true) {
		bound -= since.Sub(q.at) // kept by InTurn meanwhile
		since = q.at
	}
	t.mu.Lock()
	if t.free > 0 && t.queue.Len() == 0 {
		t.free--
		t.mu.Unlock()
		return nil
	}
	if a.queued.Load() >= a.maxQueue {
		t.mu.Unlock()
		a.m.Overloaded.WithLabelValues("queue_full").Inc()
		return fmt.Errorf("%w: %d calls wait for a Redis connection already", ErrOverloaded, a.maxQueue)
	}
	var w *turnWaiter
	var e *list.Element
	if bound > 0 {
		w = &turnWaiter{ready: make(chan struct{})}
		e = t.queue.PushBack(w)
		a.queued.Add(1)
	}
	t.mu.Unlock()
	if w != nil {
		a.m.CallsQueued.Inc()
		timer := time.NewTimer(bound)
		defer timer.Stop()
		var stop <-chan struct{}
		if patient {
			stop = a.stop
		}
		select {
		case <-w.ready:
			a.m.QueueWait.Observe(time.Since(since).Seconds())
			return nil
		case <-timer.C:
		case <-ctx.Done():
		case <-stop:
		}
		t.mu.Lock()
		if w.admitted { // given meanwhile
			t.mu.Unlock()
			if ctx.Err() == nil {
				a.m.QueueWait.Observe(time.Since(since).Seconds())
				return nil
			}
			t.leave(false)
		} else {
			t.queue.Remove(e)
			a.queued.Add(-1)
			t.mu.Unlock()
			a.m.CallsQueued.Dec()
			a.startKept()
		}
	}
	waited := time.Since(since)
	a.m.QueueWait.Observe(waited.Seconds())
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("client gone while waiting for a Redis connection: %w: %w", ErrUnavailable, ctx.Err())
	case patient && a.stopped():
		return fmt.Errorf("shutting down: %w", ErrUnavailable)
	case t.answered.Load() < since.UnixNano():
		return fmt.Errorf("%w: Redis answered no call in %v", ErrUnavailable, waited.Round(time.Millisecond))
	}
	a.m.Overloaded.WithLabelValues("queue_wait").Inc()
	return fmt.Errorf("%w: a call waited %v for a Redis connection", ErrOverloaded, waited.Round(time.Millisecond))
}

// leave gives the turn back, to the oldest call waiting if any. answered:
// the attempt got a reply from Redis.
func (t *turns) leave(answered bool) {
	if answered {
		t.answered.Store(time.Now().UnixNano())
	}
	t.mu.Lock()
	e := t.queue.Front()
	if e == nil {
		t.free++
		t.mu.Unlock()
		t.a.startKept()
		return
	}
	w := t.queue.Remove(e).(*turnWaiter)
	w.admitted = true
	t.a.queued.Add(-1)
	t.mu.Unlock()
	t.a.m.CallsQueued.Dec()
	close(w.ready)
	t.a.startKept()
}

// crowded reports whether as many calls wait for a turn (or are about to) as
// there are turns: each turn has a call to take it next, and a request InTurn
// is asked to run is kept until it is not.
func (a *admission) crowded() bool {
	return a.queued.Load()+a.running.Load() >= int64(a.inFlight)
}

// InTurn runs f(ctx), a request's start (its store calls, on ctx), at once
// unless calls queue for turns on the Redis connections; then it keeps f and
// runs it, on a goroutine of its own, once few calls wait (in the order
// InTurn was called), so that the caller can give up its goroutine meanwhile
// (a server parks the request's connection). The time f is kept counts
// towards the bound of its first call's wait for a turn. For requests that
// wait (long-polls): f's answer must be able to come on another goroutine.
func (s *Store) InTurn(ctx context.Context, f func(context.Context)) {
	a := s.adm
	a.lmu.Lock()
	if (a.later.Len() == 0 && !a.crowded()) || a.queued.Load()+int64(a.later.Len()) >= a.maxQueue || a.stopped() {
		// Room now; or no room to keep it: its call is refused as the queue's.
		a.lmu.Unlock()
		f(ctx)
		return
	}
	k := &kept{ctx: context.WithValue(ctx, queuedKey{}, &queuedAt{at: time.Now()}), f: f}
	k.el = a.later.PushBack(k)
	// Past its bound it runs at once: its call takes a turn if there is one
	// free, and is refused otherwise.
	bound, _ := a.queueWait(ctx)
	k.timer = time.AfterFunc(bound, func() { a.runKept(k) })
	a.lmu.Unlock()
	a.m.CallsQueued.Inc()
	a.startKept()
}

// startKept starts the requests InTurn kept, oldest first, while calls do
// not crowd the turns.
func (a *admission) startKept() {
	for {
		a.lmu.Lock()
		e := a.later.Front()
		if e == nil || a.crowded() {
			a.lmu.Unlock()
			return
		}
		k := a.later.Remove(e).(*kept)
		k.el = nil
		a.running.Add(1)
		a.lmu.Unlock()
		k.timer.Stop()
		a.m.CallsQueued.Dec()
		go a.run(k)
	}
}

// runKept starts k now, if it is still kept.
func (a *admission) runKept(k *kept) {
	a.lmu.Lock()
	if k.el == nil {
		a.lmu.Unlock()
		return
	}
	a.later.Remove(k.el)
	k.el = nil
	a.running.Add(1)
	a.lmu.Unlock()
	a.m.CallsQueued.Dec()
	a.run(k)
}

// runAllKept starts every request kept (the store shuts down: they are
// answered at once).
func (a *admission) runAllKept() {
	a.lmu.Lock()
	var all []*kept
	for e := a.later.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*kept))
	}
	a.lmu.Unlock()
	for _, k := range all {
		go a.runKept(k)
	}
}

func (a *admission) run(k *kept) {
	k.f(k.ctx)
	a.running.Add(-1)
	a.startKept()
}
