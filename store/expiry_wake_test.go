package store_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/store"
)

// A lock freed by its lease running out reaches the next waiter at once, for
// every ttl the server accepts: also a lease that outlives the fence guard
// (BATON_FENCE_GUARD, default 1 h, against ttls of up to 24 h).
func TestAWaiterIsWokenByTheExpiryOfALeaseThatOutlivesTheFenceGuard(t *testing.T) {
	s := newStore(t, store.Options{FenceGuard: time.Second})
	h, err := s.Acquire(as("H"), store.AcquireRequest{Name: "x", TTL: 2 * time.Second, Owner: "H"})
	if err != nil || h.Lease == nil {
		t.Fatalf("H: %+v %v", h, err)
	}
	end := time.Now().Add(h.Lease.TTL)
	const wait = 30 * time.Second
	w := request(as("W"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: wait, Owner: "W"})
	// "At once" is 50 ms; a loaded machine gets far more, and a lost wake-up
	// is answered only at the end of W's wait.
	const bound = 5 * time.Second
	select {
	case a := <-w:
		if a.err != nil || a.res.Lease == nil {
			t.Fatalf("W: %+v %v, want the lease H's expiry freed", a.res, a.err)
		}
		t.Logf("W granted %v after H's lease ran out", time.Since(end).Round(time.Millisecond))
	case <-time.After(time.Until(end) + bound):
		t.Fatalf("W, waiting %v for x, not granted %v after H's lease (2 s, one second past the fence guard) ran out: "+
			"the expiry's wake-up was lost", wait, bound)
	}
}
