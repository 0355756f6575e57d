package store

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LocalWaiters is how many long-polls this store holds on the lock, for tests
// that must wait until a request is parked.
func (s *Store) LocalWaiters(name string) int {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	if c := s.disp.chans[s.channel(name)]; c != nil {
		return len(c.waiters)
	}
	return 0
}

// PendingUndos is how many undos are under way.
func (s *Store) PendingUndos() int { return int(s.undos.n.Load()) }

// PollsInFlight is how many polls of the ticket Redis counts as in flight.
func (s *Store) PollsInFlight(ctx context.Context, name, ticket string) int {
	n := 0
	for _, f := range s.rdb.HKeys(ctx, s.lockKey(name)+":t:"+hashID(ticket)).Val() {
		if strings.HasPrefix(f, "q:") {
			n++
		}
	}
	return n
}

// LockKey is the lock's key: the only key of its name once nothing holds or
// waits (it keeps the fence for the guard).
func (s *Store) LockKey(name string) string { return s.lockKey(name) }

// StepRedisClock makes the store's estimate of its Redis's clock what it
// would be had that clock stepped by d (back when d < 0) since the store last
// read it, or had this process's own clock stepped by -d: nothing the store
// can see until it reads the clock again.
func (s *Store) StepRedisClock(d time.Duration) {
	if cs := s.clock.sample.Load(); cs != nil {
		n := *cs
		n.offset -= d
		s.clock.sample.Store(&n)
	}
}

// Hooks into the Redis Cluster side of the store: its pub/sub links, slot map,
// clocks and listing cursors.

// UnconfirmedUnsubscribes is how many SUNSUBSCRIBEs of the lock's channel the link to addr
// counts as written and not yet confirmed.
func (s *Store) UnconfirmedUnsubscribes(addr, name string) int {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	l := s.disp.links[addr]
	if l == nil {
		return -1
	}
	n := 0
	for _, op := range l.pending {
		if !op.sub && op.key == s.channel(name) {
			n++
		}
	}
	return n
}

// ChannelLink is the address of the link the lock's channel is on, and whether
// its subscription is confirmed; "" when the lock has no channel.
func (s *Store) ChannelLink(name string) (addr string, ready bool) {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	c := s.disp.chans[s.channel(name)]
	if c == nil {
		return "", false
	}
	return c.link.addr, c.ready
}

// PubSubLinks are the addresses of the store's pub/sub links.
func (s *Store) PubSubLinks() []string {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	var out []string
	for a := range s.disp.links {
		out = append(out, a)
	}
	return out
}

// NotAfter is the "not after" argument a call on the lock would carry now
// ("" when it could not be stamped).
func (s *Store) NotAfter(name string) string {
	st, err := s.stamp(context.Background(), s.lockKey(name))
	if err != nil {
		return ""
	}
	return st.notAfter
}

// MasterOf is the store's own idea of the master of the lock's slot.
func (s *Store) MasterOf(name string) string { return s.topo.Master(s.lockKey(name)) }

// Masters is the store's own list of masters.
func (s *Store) Masters() []string { return s.topo.Masters() }

// SessionKey is the key of session id's hash (its slot is the session's).
func SessionKey(s *Store, id string) string { return s.sessionKeys(id)[0] }

// CursorNode is the address of the node a listing cursor goes on with.
func (s *Store) CursorNode(ctx context.Context, cursor string) string {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return ""
	}
	c, err := parseListCursor(cursor, nodes)
	if err != nil || c.node >= len(nodes) {
		return ""
	}
	return nodes[c.node].c.(*redis.Client).Options().Addr
}

// NodeClients are the addresses the topology keeps a client (and its pool
// of connections) for.
func (s *Store) NodeClients() []string { return s.topo.NodeAddrs() }
