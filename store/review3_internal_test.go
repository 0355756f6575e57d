package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Hooks into the store's internals for the review3 cluster tests
// (review3_cluster_test.go), which run in package store_test on the shared
// cluster.

// R3Unsubs is how many SUNSUBSCRIBEs of the lock's channel the link to addr
// counts as written and not yet confirmed.
func (s *Store) R3Unsubs(addr, name string) int {
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

// R3Channel is the address of the link the lock's channel is on, and whether
// its subscription is confirmed; "" when the lock has no channel.
func (s *Store) R3Channel(name string) (addr string, ready bool) {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	c := s.disp.chans[s.channel(name)]
	if c == nil {
		return "", false
	}
	return c.link.addr, c.ready
}

// R3Links are the addresses of the store's pub/sub links.
func (s *Store) R3Links() []string {
	s.disp.mu.Lock()
	defer s.disp.mu.Unlock()
	var out []string
	for a := range s.disp.links {
		out = append(out, a)
	}
	return out
}

// R3NotAfter is the "not after" argument a call on the lock would carry now
// ("" when it could not be stamped).
func (s *Store) R3NotAfter(name string) string {
	st, err := s.stamp(context.Background(), s.lockKey(name))
	if err != nil {
		return ""
	}
	return st.notAfter
}

// R3MasterOf is the store's own idea of the master of the lock's slot.
func (s *Store) R3MasterOf(name string) string { return s.topo.Master(s.lockKey(name)) }

// R3PendingUndos is how many undos are under way.
func (s *Store) R3PendingUndos() int { return int(s.undos.n.Load()) }

// R3Masters is the store's own list of masters.
func (s *Store) R3Masters() []string { return s.topo.Masters() }

// R3SessionKey is the key of session id's hash (its slot is the session's).
func R3SessionKey(s *Store, id string) string { return s.sessionKeys(id)[0] }

// R3CursorNode is the address of the node a listing cursor goes on with.
func (s *Store) R3CursorNode(ctx context.Context, cursor string) string {
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

// R3NodeClients are the addresses the topology keeps a client (and its pool
// of connections) for.
func (s *Store) R3NodeClients() []string { return s.topo.NodeAddrs() }
