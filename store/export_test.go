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

// PendingUndos is how many abandoned requests the cleaner still has to undo.
func (s *Store) PendingUndos() int {
	s.clean.mu.Lock()
	defer s.clean.mu.Unlock()
	return len(s.clean.pending)
}
