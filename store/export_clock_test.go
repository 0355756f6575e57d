package store

import "time"

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
