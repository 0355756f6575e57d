package store

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
