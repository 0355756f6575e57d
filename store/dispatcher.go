package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store/redisconn"
)

// The dispatcher owns the process's pub/sub connections (links): one on a single
// Redis or behind Sentinel; on a Redis Cluster one per master, each lock's
// channel a sharded one (SSUBSCRIBE) on the master of its slot. Subscriptions are
// reference-counted per lock channel: the first local waiter of a lock subscribes,
// the last one out unsubscribes. A waiter's first check happens only once Redis
// has processed its channel's SUBSCRIBE, so no release can fall between the two.
// That is known from a barrier: after each batch of SUBSCRIBEs the writer sends a
// PING carrying a token, and Redis answers a connection's commands in order, so
// its pong means every SUBSCRIBE written before it took effect. Confirmations of
// single subscriptions are not counted: a connection that breaks between a
// SUBSCRIBE and its confirmation, a channel left and joined again meanwhile, or
// go-redis's own resubscription after a reconnect would make such counts lie.
// After any pub/sub error every channel is subscribed again behind a new barrier,
// and its waiters re-check once it is ready.
//
// Messages are dispatched in-process: 'g:<ticket hash>…' wakes exactly that ticket's
// waiter with its grant; 'r' wakes one non-fair waiter (no thundering herd); both
// wake every watcher. Each channel also has a timer at the holder's expected lease
// end, which pokes the lock (expiry runs no script). When the connection comes back
// after a drop, go-redis resubscribes and every waiter of each channel re-checks.
// A connection that is silently dead (no error, no reply: the peer gone without a
// FIN) is found by a ping that gets no pong, and replaced (renew).
//
// On a cluster a link is never left to go-redis's reconnect, which would send
// all its channels in one SSUBSCRIBE (refused: CROSSSLOT): after any error the
// link gets a fresh connection and every channel of it is routed and subscribed
// again, one by one (renew). A channel moves to another link when the slot map
// says its slot moved (redisconn.Topology, reroute), when an SSUBSCRIBE is answered MOVED
// (moved), and when the server unsubscribes it because its slot left the node
// (unsubscribed); its waiters re-check once the new subscription is confirmed,
// as after a reconnect. Messages published while a slot migrates, on the node
// the subscription is not on, are lost; that re-check covers them.
//
// Files: dispatcher.go (the registry of channels and waiters),
// dispatcher_link.go (links and their writers, barriers, renewal),
// dispatcher_receive.go (the readers, message dispatch), dispatcher_timers.go
// (expiry pokes), dispatcher_cluster.go (channels following their slots).

type waiterKind int

const (
	kindAcquire waiterKind = iota // non-fair acquire
	kindTicket                    // a fair ticket's poll
	kindWatch                     // a lock-state watch
)

type waiter struct {
	kind   waiterKind
	shared bool   // kindAcquire: it asks for a shared hold
	th     string // kindTicket: its ticket's hash; kindAcquire: its lease's hash
	ch     *channel
	wake   func() // "look at your state"; called under dispatcher.mu, so it must not block

	// guarded by dispatcher.mu
	recheck bool
	grant   *grantMsg
	woken   bool // kindAcquire: a release was passed to it and not yet taken
}

type channel struct {
	name     string // lock name
	key      string // channel name
	waiters  []*waiter
	link     *link  // the connection it is subscribed on
	ready    bool   // Redis has processed the channel's latest SUBSCRIBE
	subSeq   uint64 // the op sequence number of that SUBSCRIBE, on link
	timer    *time.Timer
	deadline time.Time
}

type dispatcher struct {
	rdb  redis.UniversalClient
	topo *redisconn.Topology // nil: one Redis (or Sentinel), one link
	poke func(ctx context.Context, name string) (held bool, pttl time.Duration, err error)
	log  zerolog.Logger
	m    *metrics.Metrics

	mu    sync.Mutex
	chans map[string]*channel
	links map[string]*link // by node address; "" for the one link of a single Redis

	done chan struct{}
	wg   sync.WaitGroup
}

func newDispatcher(rdb redis.UniversalClient, topo *redisconn.Topology, poke func(context.Context, string) (bool, time.Duration, error), log zerolog.Logger, m *metrics.Metrics) *dispatcher {
	d := &dispatcher{
		rdb:   rdb,
		topo:  topo,
		poke:  poke,
		log:   log,
		m:     m,
		chans: make(map[string]*channel),
		links: make(map[string]*link),
		done:  make(chan struct{}),
	}
	if topo == nil {
		d.mu.Lock()
		d.newLink("", rdb)
		d.mu.Unlock()
	} else {
		topo.Listen(d.reroute)
	}
	return d
}

func (d *dispatcher) close() error {
	d.mu.Lock()
	if d.closed() {
		d.mu.Unlock()
		return nil
	}
	close(d.done) // under mu: no link is made or renewed after this
	pss := make([]*redis.PubSub, 0, len(d.links))
	for _, l := range d.links {
		pss = append(pss, l.ps)
	}
	d.mu.Unlock()
	var err error
	for _, ps := range pss {
		if e := ps.Close(); e != nil && err == nil {
			err = e
		}
	}
	d.wg.Wait()
	d.mu.Lock()
	for _, c := range d.chans {
		c.stopTimer()
	}
	d.m.PubSubConns.Sub(float64(len(d.links)))
	d.mu.Unlock()
	return err
}

func (d *dispatcher) closed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// add registers a waiter on the lock's channel. Its wake is called once the
// subscription is confirmed (at once if it already is), and on every event for it.
func (d *dispatcher) add(name, key string, kind waiterKind, th string, shared bool, wake func()) *waiter {
	w := &waiter{kind: kind, th: th, shared: shared, wake: wake}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.chans[key]
	if c == nil {
		c = &channel{name: name, key: key}
		d.chans[key] = c
		d.subscribe(c)
	}
	w.ch = c
	c.waiters = append(c.waiters, w)
	if c.ready {
		w.notify()
	}
	return w
}

// remove unregisters a waiter. A non-fair waiter that leaves holding a release it
// did not act on passes it to the next one, so the wake is not lost.
func (d *dispatcher) remove(w *waiter, forward bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := w.ch
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i:i], c.waiters[i+1:]...)
			break
		}
	}
	if w.kind == kindAcquire && (w.woken || forward) {
		c.wakeOneAcquirer(w.shared)
	}
	if len(c.waiters) == 0 && d.chans[c.key] == c {
		delete(d.chans, c.key)
		c.stopTimer()
		c.link.n--
		c.link.queueOp(subOp{sub: false, key: c.key})
	}
}

// take returns and clears what the waiter was signalled for.
func (d *dispatcher) take(w *waiter) (recheck bool, g *grantMsg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	recheck, g = w.recheck, w.grant
	w.recheck, w.grant, w.woken = false, nil, false
	return recheck, g
}

// observe arms the waiter's channel timer at the holder's remaining lease, if that
// is sooner than the time already set.
func (d *dispatcher) observe(w *waiter, pttl time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.chans[w.ch.key] == w.ch {
		d.arm(w.ch, pttl)
	}
}

// notify marks a re-check and wakes the waiter; the caller holds dispatcher.mu.
func (w *waiter) notify() {
	w.recheck = true
	w.wake()
}

// wakeOneAcquirer wakes the first non-fair waiter of the mode (shared or not)
// that has no wake pending: a hold's end may let in one exclusive waiter, or a
// shared one where an exclusive one still does not fit, so a release wakes one
// of each, and a waiter passes a wake it did not use on to one of its own mode.
func (c *channel) wakeOneAcquirer(shared bool) {
	for _, w := range c.waiters {
		if w.kind == kindAcquire && w.shared == shared && !w.woken {
			w.woken = true
			w.notify()
			return
		}
	}
}
