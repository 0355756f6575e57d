package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The dispatcher's links: one pub/sub connection each, and the writer that
// sends its subscription changes in order, each batch that subscribes ended by
// a barrier ping whose pong readies the channels it covers.

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
	goLabelled(labelLinkReader, func() { d.receive(l) })
	goLabelled(labelLinkWriter, func() { d.write(l) })
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
