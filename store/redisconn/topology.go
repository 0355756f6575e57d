package redisconn

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topology is the store's own map of a Redis Cluster's slots to masters, and
// a client per master for what must reach one node: pub/sub links, WAIT
// pipelines, TIME. It is loaded with CLUSTER SLOTS at start, every
// topologyEvery, and soon after anything suggests it changed (Refresh): a
// MOVED reply, a link that broke, a channel the server unsubscribed. Between
// loads a MOVED reply moves its slot at once (Moved).
type Topology struct {
	cc   *redis.ClusterClient
	opts *redis.ClusterOptions

	mu      sync.Mutex
	slots   []string // 16384 entries: the master's address, "" unknown
	version uint64   // grows with every change to slots
	nodes   map[string]*redis.Client
	gone    map[string]time.Time // nodes with a client and no slot: since when
	closed  bool

	kick     chan struct{} // a refresh is wanted
	onChange []func()      // each called (outside mu) after slots changed
	done     chan struct{}
	wg       sync.WaitGroup
	loaded   atomic.Bool
}

// topologyEvery is how often the slot map is loaded without a reason.
const topologyEvery = 2 * time.Second

// topologyMinGap spaces out loads asked for by events.
const topologyMinGap = 50 * time.Millisecond

// NewTopology starts keeping the slot map of cc; Close stops it.
func NewTopology(cc *redis.ClusterClient) *Topology {
	t := &Topology{
		cc:    cc,
		opts:  cc.Options(),
		slots: make([]string, 16384),
		nodes: make(map[string]*redis.Client),
		gone:  make(map[string]time.Time),
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	t.wg.Add(1)
	// Labelled for goroutine profiles, as the store labels its own.
	go pprof.Do(context.Background(), pprof.Labels("baton", "cluster-topology"), func(context.Context) { t.run() })
	return t
}

func (t *Topology) run() {
	defer t.wg.Done()
	tick := time.NewTicker(topologyEvery)
	defer tick.Stop()
	t.load()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		case <-t.kick:
		}
		t.load()
		select { // events that came during the load are covered by the next one
		case <-t.done:
			return
		case <-time.After(topologyMinGap):
		}
	}
}

// Refresh asks for a load soon.
func (t *Topology) Refresh() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// load reads CLUSTER SLOTS from the nodes the cluster client knows, trying
// seeds and masters until one answers.
func (t *Topology) load() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ranges, err := t.cc.ClusterSlots(ctx).Result()
	if err != nil {
		return
	}
	next := make([]string, 16384)
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		for s := r.Start; s <= r.End && s < 16384; s++ {
			next[s] = r.Nodes[0].Addr
		}
	}
	t.mu.Lock()
	changed := false
	for i := range next {
		if next[i] != t.slots[i] {
			changed = true
			break
		}
	}
	if changed {
		t.slots = next
		t.version++
	}
	fs := t.onChange
	t.mu.Unlock()
	t.loaded.Store(true)
	if changed {
		for _, f := range fs {
			f()
		}
	}
	t.closeGone()
}

// nodeGrace is how long a node serves no slot before its client is closed:
// what was sent to it just before it lost its slots may still be answering.
const nodeGrace = topologyEvery

// closeGone closes the clients (and their pools of connections) of the nodes
// that have served no slot for nodeGrace: a master demoted by a failover, a
// node gone for good. The store's pub/sub dispatcher drops its links to them
// by itself; a client is made again if the node comes back as a master.
func (t *Topology) closeGone() {
	t.mu.Lock()
	masters := map[string]bool{}
	for _, a := range t.slots {
		masters[a] = true
	}
	now := time.Now()
	var stale []*redis.Client
	for addr, c := range t.nodes {
		since, ok := t.gone[addr]
		switch {
		case masters[addr]:
			delete(t.gone, addr)
		case !ok:
			t.gone[addr] = now
		case now.Sub(since) >= nodeGrace:
			delete(t.nodes, addr)
			delete(t.gone, addr)
			stale = append(stale, c)
		}
	}
	t.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
}

// Listen has f called after every change to the slot map.
func (t *Topology) Listen(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = append(t.onChange, f)
}

// Master is the address of the master of key's slot, "" while unknown.
func (t *Topology) Master(key string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.slots[Slot(key)]
}

// Moved records a MOVED reply: slot now lives at addr. A full load follows.
func (t *Topology) Moved(slotNo int, addr string) {
	t.mu.Lock()
	changed := slotNo >= 0 && slotNo < len(t.slots) && t.slots[slotNo] != addr
	if changed {
		t.slots[slotNo] = addr
		t.version++
	}
	fs := t.onChange
	t.mu.Unlock()
	t.Refresh()
	if changed {
		for _, f := range fs {
			f()
		}
	}
}

// Masters are the addresses that serve at least one slot.
func (t *Topology) Masters() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, a := range t.slots {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// Node returns the client of the node at addr, made on first use with the
// cluster client's settings (credentials, TLS, timeouts, no retries).
func (t *Topology) Node(addr string) *redis.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.nodes[addr]; c != nil {
		return c
	}
	o := t.opts
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		Username:                 o.Username,
		Password:                 o.Password,
		TLSConfig:                o.TLSConfig,
		Dialer:                   o.Dialer,
		MaxRetries:               o.MaxRetries,
		DialerRetries:            o.DialerRetries,
		DialTimeout:              o.DialTimeout,
		ReadTimeout:              o.ReadTimeout,
		WriteTimeout:             o.WriteTimeout,
		ContextTimeoutEnabled:    o.ContextTimeoutEnabled,
		PoolSize:                 o.PoolSize,
		MaintNotificationsConfig: noMaintNotifications(),
	})
	if t.closed {
		_ = c.Close()
		return c // closed: every call fails with ErrClosed
	}
	t.nodes[addr] = c
	return c
}

// Loaded reports whether the slot map has been read at least once.
func (t *Topology) Loaded() bool { return t.loaded.Load() }

// Seed is the first address the cluster client was given: where to go while
// the slot map is not loaded yet.
func (t *Topology) Seed() string { return t.opts.Addrs[0] }

// NodeAddrs are the addresses Node keeps a client (and its pool of
// connections) for.
func (t *Topology) NodeAddrs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.nodes))
	for a := range t.nodes {
		out = append(out, a)
	}
	return out
}

// Close stops the loads and closes every node's client.
func (t *Topology) Close() {
	select {
	case <-t.done:
		return
	default:
	}
	close(t.done)
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, c := range t.nodes {
		_ = c.Close()
	}
}
