package store

import (
	"context"
	"strings"
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
