package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
// says its slot moved (topology, reroute), when an SSUBSCRIBE is answered MOVED
// (moved), and when the server unsubscribes it because its slot left the node
// (unsubscribed); its waiters re-check once the new subscription is confirmed,
// as after a reconnect. Messages published while a slot migrates, on the node
// the subscription is not on, are lost; that re-check covers them.

type waiterKind int

const (
	kindAcquire waiterKind = iota // non-fair acquire
	kindTicket                    // a fair ticket's poll
	kindWatch                     // a lock-state watch
)

// grantMsg is a handoff announced on the channel.
type grantMsg struct {
	fence   int64
	at      time.Time
	window  time.Duration
	claimed bool     // granted with the full ttl because the waiter was polling
	polls   []string // the polls in flight it was granted for (their ids); nil: any (an older script)
	shared  bool
	limit   int
	owner   string
	recv    time.Time // when this process received the message, by its own clock
}

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

type subOp struct {
	sub bool
	key string
	seq uint64
}

// barrierPrefix starts the payload of the writer's barrier pings.
const barrierPrefix = "baton-barrier:"

// barrier is a barrier ping in flight: its pong readies every channel whose
// SUBSCRIBE was written before it (subSeq <= upTo).
type barrier struct {
	token uint64
	upTo  uint64
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

// link is one pub/sub connection, and the subscription changes on their way to it.
type link struct {
	addr   string                // the node's address on a cluster; "" on one Redis
	client redis.UniversalClient // the client its connections come from

	// guarded by dispatcher.mu
	ps       *redis.PubSub // renew replaces it
	ops      []subOp       // subscription changes waiting for the writer, in order
	opSeq    uint64        // the last op's sequence number
	barriers []barrier
	token    uint64 // the last barrier's token
	resync   bool   // a pub/sub error happened: subscribe everything again
	// cluster: the SSUBSCRIBEs and SUNSUBSCRIBEs written on ps whose reply
	// has not come, oldest first. The node answers them in order, each with
	// its confirmation or an error (MOVED); a sunsubscribe that answers none
	// of them is the node's own, its slot gone.
	pending  []subOp
	n        int // channels on this link
	opsReady chan struct{}
	done     chan struct{} // closed when the link is dropped
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

// newLink starts a link to the node at addr; the caller holds d.mu.
func (d *dispatcher) newLink(addr string, client redis.UniversalClient) *link {
	l := &link{
		addr:     addr,
		client:   client,
		ps:       client.Subscribe(context.Background()), // connects on its first use
		opsReady: make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	d.links[addr] = l
	d.m.PubSubConns.Inc()
	d.wg.Add(2)
	go d.receive(l)
	go d.write(l)
	return l
}

// linkFor is the link a channel belongs on now, made if need be; the caller
// holds d.mu.
func (d *dispatcher) linkFor(key string) *link {
	if d.topo == nil {
		return d.links[""]
	}
	addr := d.topo.Master(key)
	if addr == "" { // no slot map yet: a seed; a MOVED reply will say where
		addr = d.topo.Seed()
	}
	if l := d.links[addr]; l != nil {
		return l
	}
	return d.newLink(addr, d.topo.Node(addr))
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

func (c *channel) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// expiryMargin is how long after the expected lease end the poke runs: Redis
// expires a key once its time has strictly passed.
const expiryMargin = 2 * time.Millisecond

// arm sets the channel's timer; the caller holds d.mu.
func (d *dispatcher) arm(c *channel, pttl time.Duration) {
	if pttl < 0 {
		pttl = 0
	}
	at := time.Now().Add(pttl + expiryMargin)
	if c.timer != nil {
		if !c.deadline.After(at) {
			return
		}
		c.timer.Stop()
	}
	c.deadline = at
	c.timer = time.AfterFunc(time.Until(at), func() { d.fire(c) })
}

// fire pokes a lock whose holder's lease should have run out. The poke hands it on
// and publishes; if it is still held (renewed, or a new holder), the timer is set
// again to the new lease end.
func (d *dispatcher) fire(c *channel) {
	d.mu.Lock()
	if d.chans[c.key] != c {
		d.mu.Unlock()
		return
	}
	c.timer = nil
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	held, pttl, err := d.poke(ctx, c.name)
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.chans[c.key] != c {
		return
	}
	switch {
	case err != nil:
		d.arm(c, 50*time.Millisecond)
	case !held:
		// Free: the poke may have announced nothing (nobody's interest was
		// left on the lock: its key ran out with a hold that outlived the
		// fence guard). This process's own waiters look, as an 'r' makes them.
		c.wakeOneAcquirer(false)
		c.wakeOneAcquirer(true)
		for _, w := range c.waiters {
			if w.kind == kindWatch {
				w.notify()
			}
		}
	case held:
		d.arm(c, pttl)
		// Held at the lease's end: renewed, or taken by someone else after the
		// lease ran out and before this poke, which published nothing. Watchers
		// look: a change of hands by expiry must not go unseen.
		for _, w := range c.waiters {
			if w.kind == kindWatch {
				w.notify()
			}
		}
	}
}

// subscribe queues a SUBSCRIBE for c on the link it belongs on (an
// UNSUBSCRIBE on the one it was on, if that is another); c is not ready until
// a barrier written after it comes back. The caller holds d.mu.
func (d *dispatcher) subscribe(c *channel) {
	l := d.linkFor(c.key)
	if c.link != l {
		if c.link != nil {
			c.link.n--
			c.link.queueOp(subOp{sub: false, key: c.key})
		}
		c.link = l
		l.n++
	}
	c.ready = false
	c.subSeq = l.queueOp(subOp{sub: true, key: c.key})
}

// queueOp queues a subscription change and returns its sequence number; the
// caller holds d.mu.
func (l *link) queueOp(op subOp) uint64 {
	l.opSeq++
	op.seq = l.opSeq
	l.ops = append(l.ops, op)
	select {
	case l.opsReady <- struct{}{}:
	default:
	}
	return op.seq
}

// write sends a link's subscription changes in the order they were made, off
// the caller's path and outside d.mu, so a slow connection never blocks message
// dispatch. A batch that subscribes ends with a barrier ping.
func (d *dispatcher) write(l *link) {
	defer d.wg.Done()
	sharded := d.topo != nil
	for {
		select {
		case <-d.done:
			return
		case <-l.done:
			return
		case <-l.opsReady:
		}
		d.mu.Lock()
		ops := l.ops
		l.ops = nil
		ps := l.ps
		d.mu.Unlock()
		var upTo uint64
		failed := false
		for _, op := range ops {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			switch {
			case op.sub && sharded:
				d.expect(l, ps, op)
				err = ps.SSubscribe(ctx, op.key)
			case op.sub:
				err = ps.Subscribe(ctx, op.key)
			case sharded:
				d.expect(l, ps, op)
				err = ps.SUnsubscribe(ctx, op.key)
			default:
				err = ps.Unsubscribe(ctx, op.key)
			}
			cancel()
			if op.sub {
				upTo = op.seq
			}
			if err != nil {
				failed = true
				if op.sub {
					d.subscribeFailed(l, ps, op.key)
				}
			}
		}
		if upTo > 0 && !failed {
			d.mu.Lock()
			l.token++
			token := l.token
			l.barriers = append(l.barriers, barrier{token: token, upTo: upTo})
			d.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			failed = ps.Ping(ctx, barrierPrefix+strconv.FormatUint(token, 10)) != nil
			cancel()
		}
		if failed {
			// go-redis may have reconnected inside the failed call, resubscribing
			// only what its own list held (on a cluster, refused: CROSSSLOT):
			// subscribe everything again, behind a new barrier, once the
			// connection answers. Unless the connection was replaced meanwhile:
			// its replacement subscribed everything already.
			d.mu.Lock()
			if l.ps == ps {
				l.resync = true
			}
			d.mu.Unlock()
		}
	}
}

// subscribeFailed lets the channel's waiters check once anyway; the channel is
// subscribed again, and they re-check again, when the connection answers.
func (d *dispatcher) subscribeFailed(l *link, ps *redis.PubSub, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.chans[key]; c != nil && c.link == l && l.ps == ps {
		for _, w := range c.waiters {
			w.notify()
		}
	}
}

// barrierDone readies the channels a barrier of link l covers and wakes their
// waiters.
func (d *dispatcher) barrierDone(l *link, payload string) {
	token, err := strconv.ParseUint(strings.TrimPrefix(payload, barrierPrefix), 10, 64)
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var upTo uint64
	found := false
	i := 0
	for ; i < len(l.barriers) && l.barriers[i].token <= token; i++ {
		if l.barriers[i].token == token {
			upTo, found = l.barriers[i].upTo, true
		}
	}
	l.barriers = l.barriers[i:] // earlier ones were lost with a connection
	if !found {
		return
	}
	for _, c := range d.chans {
		if c.link == l && !c.ready && c.subSeq != 0 && c.subSeq <= upTo {
			c.ready = true
			for _, w := range c.waiters {
				w.notify()
			}
		}
	}
}

// resubscribeAll subscribes every channel of link l again after a pub/sub
// error (routed afresh, on a cluster); their waiters re-check once the barrier
// behind it comes back. The caller holds d.mu.
func (d *dispatcher) resubscribeAll(l *link) {
	l.resync = false
	d.m.PubSubReconnects.Inc()
	for _, c := range d.chans {
		if c.link == l {
			d.subscribe(c)
		}
	}
}

// healthEvery is how long the connection may go without a pong before a ping;
// pongWait is how long after the ping the pong may take before the connection
// is taken for dead. go-redis reconnects on an error, but a read timeout is no
// error to it, and writes to a dead peer succeed until TCP gives up, minutes on.
const healthEvery, pongWait = time.Second, 2 * time.Second

// renew gives link l a new connection, closing the old one, and subscribes
// every channel of it again through the writers, in order with the changes
// queued before; each counts as not confirmed until Redis says so, and its
// waiters re-check then, as after a reconnect by go-redis. It replaces a
// silently dead connection, and on a cluster every broken one.
func (d *dispatcher) renew(l *link) {
	ps := l.client.Subscribe(context.Background()) // connects on its first use
	d.mu.Lock()
	if d.closed() || d.links[l.addr] != l {
		d.mu.Unlock()
		_ = ps.Close()
		return
	}
	old := l.ps
	l.ps = ps
	l.barriers = nil
	l.pending = nil
	d.resubscribeAll(l)
	d.dropIdle()
	d.mu.Unlock()
	_ = old.Close()
}

// reroute moves every channel whose slot the slot map now puts on another
// master; the topology calls it when the map changed.
func (d *dispatcher) reroute() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed() {
		return
	}
	for _, c := range d.chans {
		if addr := d.topo.Master(c.key); addr != "" && addr != c.link.addr {
			d.subscribe(c)
		}
	}
	d.dropIdle()
}

// moved handles a MOVED reply to an SSUBSCRIBE or SUNSUBSCRIBE on ps, link
// l's connection: the slot map learns it (and reroutes what it changed), and
// every channel of that slot still on l is subscribed again where the map
// says.
func (d *dispatcher) moved(l *link, ps *redis.PubSub, slotNo int, addr string) {
	d.topo.Moved(slotNo, addr)
	d.mu.Lock()
	defer d.mu.Unlock()
	l.answered(ps, false, func(op subOp) bool { return redisconn.Slot(op.key) == slotNo })
	if d.closed() {
		return
	}
	for _, c := range d.chans {
		if c.link == l && redisconn.Slot(c.key) == slotNo {
			d.subscribe(c)
		}
	}
	d.dropIdle()
}

// expect records that the writer is about to send op on ps, link l's
// connection (unless it was replaced meanwhile).
func (d *dispatcher) expect(l *link, ps *redis.PubSub, op subOp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.ps == ps {
		l.pending = append(l.pending, op)
	}
}

// answered takes the oldest command pending on ps, link l's connection, if
// match says the reply just read answers it; the caller holds d.mu. Entries
// before a match got no reply (their write failed): they are dropped with it.
func (l *link) answered(ps *redis.PubSub, oldestOnly bool, match func(subOp) bool) bool {
	if l.ps != ps {
		return false
	}
	for i, op := range l.pending {
		if match(op) {
			l.pending = l.pending[i+1:]
			return true
		}
		if oldestOnly {
			return false
		}
	}
	return false
}

// subscribed handles the confirmation of an SSUBSCRIBE on ps.
func (d *dispatcher) subscribed(l *link, ps *redis.PubSub, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l.answered(ps, false, func(op subOp) bool { return op.sub && op.key == key })
}

// unsubscribed handles a SUNSUBSCRIBE from link l's node: the confirmation of
// the oldest command the writer sent on ps, or the node giving the channel up
// because its slot left it. Then the channel is subscribed again where the
// slot map says, and the map is loaded afresh; if it was behind, the
// SSUBSCRIBE goes to the same node, is answered MOVED, and that moves it.
func (d *dispatcher) unsubscribed(l *link, ps *redis.PubSub, key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.answered(ps, true, func(op subOp) bool { return !op.sub && op.key == key }) {
		return
	}
	c := d.chans[key]
	if c == nil || c.link != l || d.closed() {
		return
	}
	d.topo.Refresh()
	d.subscribe(c)
}

// dropIdle stops the links to nodes that serve no slot and carry no channel
// (a master that failed over, or gave its slots away); the caller holds d.mu.
func (d *dispatcher) dropIdle() {
	if d.topo == nil {
		return
	}
	masters := map[string]bool{}
	for _, a := range d.topo.Masters() {
		masters[a] = true
	}
	for addr, l := range d.links {
		if l.n == 0 && len(l.ops) == 0 && !masters[addr] {
			delete(d.links, addr)
			close(l.done)
			d.m.PubSubConns.Dec()
			go l.ps.Close()
		}
	}
}

// receive reads link l's connection until close. On one Redis, go-redis
// reconnects and resubscribes by itself after an error; the confirmations that
// follow make every waiter of those channels re-check. On a cluster the link
// is renewed instead (its channels span slots, and go-redis would send them in
// one SSUBSCRIBE, which a cluster refuses). A connection silent for
// healthEvery is pinged, and renewed when pongWait passes without a word.
//
// The pause after an error stays short: go-redis has usually re-established the
// connection already when the error comes back, and nothing is read (no
// confirmation, no release) while this loop sleeps, so the pause is how long a
// waiter may sleep through a free lock once Redis is back.
func (d *dispatcher) receive(l *link) {
	defer d.wg.Done()
	const minBackoff, maxBackoff = 10 * time.Millisecond, 100 * time.Millisecond
	backoff := minBackoff
	ctx := context.Background()
	lastPong := time.Now()
	var pinged time.Time // when a ping went out unanswered; zero when none
	for {
		d.mu.Lock()
		ps := l.ps
		d.mu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, healthEvery)
		select {
		case <-d.done:
			return
		case <-l.done:
			return
		default:
		}
		if kind, slotNo, addr, ok := redisconn.Redirect(err); ok && kind == "MOVED" && d.topo != nil {
			// The answer to one SSUBSCRIBE: the connection itself is fine.
			d.moved(l, ps, slotNo, addr)
			continue
		}
		var nerr interface{ Timeout() bool }
		if err != nil && !(errors.As(err, &nerr) && nerr.Timeout()) {
			// go-redis reconnects on an error; the ping went with the old connection,
			// and so may have SUBSCRIBEs and barriers.
			pinged, lastPong = time.Time{}, time.Now()
			d.mu.Lock()
			l.resync = true
			d.mu.Unlock()
			if backoff == minBackoff { // once per outage, not on every retry
				d.log.Warn().Err(err).Str("node", l.addr).Msg("pub/sub connection lost; reconnecting")
			}
			if d.topo != nil {
				d.topo.Refresh()
			}
			select {
			case <-d.done:
				return
			case <-l.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, maxBackoff)
			if d.topo != nil {
				d.renew(l)
			}
			continue
		}
		if err == nil {
			backoff = minBackoff
			d.mu.Lock()
			resync := l.resync && l.ps == ps
			if resync && d.topo == nil {
				d.resubscribeAll(l)
			}
			d.mu.Unlock()
			if resync && d.topo != nil {
				d.renew(l)
				continue
			}
			switch m := msg.(type) {
			case *redis.Pong:
				// Only a pong proves the connection carries what Baton sends:
				// messages from Redis may keep coming on a connection whose other
				// direction is dead (SUBSCRIBEs, barriers and pings lost).
				pinged, lastPong = time.Time{}, time.Now()
				if strings.HasPrefix(m.Payload, barrierPrefix) {
					d.barrierDone(l, m.Payload)
				}
			case *redis.Message:
				d.dispatch(m.Channel, m.Payload)
			case *redis.Subscription:
				switch {
				case d.topo == nil:
				case m.Kind == "ssubscribe":
					d.subscribed(l, ps, m.Channel)
				case m.Kind == "sunsubscribe":
					d.unsubscribed(l, ps, m.Channel)
				}
			}
		}
		switch {
		case pinged.IsZero() && time.Since(lastPong) >= healthEvery:
			// A dead connection answers nothing; a broken one errors here, and
			// go-redis has then reconnected and resubscribed by itself, so the
			// next read brings no error: what was published meanwhile is lost,
			// and the waiters must re-check as after any other loss.
			if err := ps.Ping(ctx); err != nil {
				d.mu.Lock()
				if l.ps == ps {
					l.resync = true
				}
				d.mu.Unlock()
				pinged, lastPong = time.Time{}, time.Now()
				continue
			}
			pinged = time.Now()
		case !pinged.IsZero() && time.Since(pinged) >= pongWait:
			d.log.Warn().Dur("silent", healthEvery+pongWait).Str("node", l.addr).
				Msg("pub/sub connection silent after a ping; replacing it")
			d.renew(l)
			pinged, lastPong = time.Time{}, time.Now()
		}
	}
}

func (d *dispatcher) dispatch(key, payload string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.chans[key]
	if c == nil {
		return
	}
	var th string
	var g *grantMsg
	switch {
	case payload == "r":
		c.wakeOneAcquirer(false)
		c.wakeOneAcquirer(true)
	case payload == "c": // the holds changed: only watchers care
	case strings.HasPrefix(payload, "i:"):
		// An idempotent request was granted: its duplicates waiting here (the
		// same lease hash) answer with its hold.
		for _, w := range c.waiters {
			if w.kind == kindAcquire && w.th == payload[2:] {
				w.notify()
			}
		}
	case strings.HasPrefix(payload, "w:"):
		// A hold now ends sooner than announced (a shorter renewal, a grant
		// turned back into an unclaimed one): look again then.
		if ms, err := strconv.ParseInt(payload[2:], 10, 64); err == nil {
			d.arm(c, time.Duration(ms)*time.Millisecond)
		}
		return
	case strings.HasPrefix(payload, "g:"):
		th, g = parseGrant(payload)
		if g == nil {
			d.log.Error().Msg("malformed grant message")
			return
		}
		g.recv = time.Now()
		d.arm(c, g.window)
	default:
		return
	}
	for _, w := range c.waiters {
		switch {
		case w.kind == kindWatch:
			w.notify()
		case w.kind == kindTicket && g != nil && w.th == th:
			w.grant = g
			w.notify()
		}
	}
}

// parseGrant reads
// 'g:<ticket hash>:<fence>:<at>:<window>:<claimed>:<shared>:<limit>:<owner>'; the
// owner comes last because it may itself contain ':'.
func parseGrant(p string) (string, *grantMsg) {
	f := strings.SplitN(p, ":", 9)
	if len(f) != 9 {
		return "", nil
	}
	fence, err1 := strconv.ParseInt(f[2], 10, 64)
	at, err2 := strconv.ParseInt(f[3], 10, 64)
	window, err3 := strconv.ParseInt(f[4], 10, 64)
	limit, err4 := strconv.Atoi(f[7])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return "", nil
	}
	g := &grantMsg{
		fence:   fence,
		at:      fromMillis(at),
		window:  time.Duration(window) * time.Millisecond,
		claimed: f[5] != "0" && f[5] != "",
		shared:  f[6] == "1",
		owner:   f[8],
	}
	if g.shared {
		g.limit = limit
	}
	if polls := strings.Split(f[5], ","); g.claimed && len(polls) > 1 {
		g.polls = polls[1:]
	}
	return f[1], g
}
