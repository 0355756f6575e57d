package store

import (
	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// The dispatcher on a Redis Cluster: channels follow their slot from master to
// master (reroute, moved, unsubscribed), and links to nodes that serve no slot
// are dropped (dropIdle).

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
