package park

// Held is how many connections the lot holds: parked, or idle after their
// answer.
func (l *Lot) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.spots)
}
