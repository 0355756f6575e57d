package handlers_test

import (
	"net/http"
	"testing"
	"time"
)

// Hostile review 2: waits.

// A non-fair waiter's 423 describes the lock as the waiter last looked at it,
// not as it is when the wait ends: waitLock returns the HeldError of its last
// check. When the lock changes hands meanwhile without waking it (a release
// hands it to a ticket: 'g:' wakes only that ticket's waiter), the 423 names
// the holder that left, with that holder's old ttl_ms and Retry-After.
func TestReview2LockHeldAnswerIsStale(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.acquire("st", map[string]any{"ttl_ms": 30000, "owner": "H"})
	e.enqueue("st", map[string]any{"ttl_ms": 5000, "owner": "T"})
	w := e.parkWaiter("st", map[string]any{"wait_ms": 2000, "owner": "W"})
	e.release(h) // handed to T
	got := awaitAnswer(t, w, 10*time.Second).r
	wantStatus(t, got, http.StatusLocked, "lock-held")
	if got.Str("owner") != "T" || got.Int("ttl_ms") > 5000 {
		t.Errorf("423 at the end of W's wait names owner %q with ttl_ms %d (Retry-After %s); the lock is T's, with at most 5000 ms: %s",
			got.Str("owner"), got.Int("ttl_ms"), got.Header.Get("Retry-After"), e.state("st").Raw)
	}
}
