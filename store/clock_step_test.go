package store_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
)

// The store decides what a call with an unknown outcome made once the call's
// "not after" has passed, reckoned on its estimate of the Redis clock. That
// clock may step back (NTP, a failover to a host whose clock is behind), and
// this process's own clock may step forward, between the store's readings of
// it. A late copy must still be dead when the store decides: here Redis's
// clock steps back by 10 s just before A's call, whose first attempt is held
// up in the network; once A is answered (the lock is held: the store may take
// the 10 s to be sure), H releases and A's first attempt reaches Redis.
// Nobody was told of a hold: none may outlive the settle window.
func TestALateCopyIsDeadWhenTheStoreDecidesEvenIfTheRedisClockSteppedBack(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")

	s.StepRedisClock(-10 * time.Second)
	first := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.HoldBack})
	a := request(as("A"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A"})
	caught(t, first, "A's first attempt")
	select {
	case ans := <-a:
		if ans.res.Lease != nil {
			t.Fatalf("A was given a lease (fence %d) while H holds the lock", ans.res.Lease.Fence)
		}
		t.Logf("A answered %+v, %v", ans.res, ans.err)
	case <-time.After(3 * answerBound):
		t.Fatalf("A not answered after %v", 3*answerBound)
	}

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	delivered(t, "A's first attempt", first.Deliver())
	freeWithin(t, s, "x", since, "after A's late first attempt")
}
