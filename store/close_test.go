package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// Close (a gateway stopping, without a Shutdown long before it) must leave
// behind nothing nobody knows of: no hold, no ticket. And it must not be held
// up by the long-polls it ends.

// closePrefix is a prefix of its own, so that a second store can look at what
// a closed one left.
func closePrefix(what string) string {
	return what + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// Close while a fair acquire waits on the ticket it queued: either the client
// is answered its ticket, or nothing is left of that ticket (a ticket nobody
// knows stays queued, is granted in turn and holds the lock for its claim
// window).
func TestCloseDuringAFairWaitLeavesNoTicketNobodyKnows(t *testing.T) {
	prefix := closePrefix("cf")
	s := newStore(t, store.Options{Prefix: prefix})
	mustAcquire(t, s, "H", "x")
	a := request(as("A"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true, Wait: 30 * time.Second})
	awaitCond(t, "A's ticket to be queued", func() bool { return stateOf(t, s, "x").Waiters == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ans := answered(t, "A", a)
	st := stateOf(t, newStore(t, store.Options{Prefix: prefix}), "x")
	switch {
	case ans.res.Lease != nil:
		t.Fatalf("A was answered a lease (fence %d) while H holds", ans.res.Lease.Fence)
	case ans.res.Ticket != nil:
		t.Logf("A was answered its ticket; %d queued", st.Waiters)
	default:
		t.Logf("A was answered %v", ans.err)
		if st.Waiters > 0 {
			t.Fatalf("A was answered %v, and its ticket stays queued (%d queued), known to nobody", ans.err, st.Waiters)
		}
	}
}

// closeBound: Close gives the requests it ends up to 5 s to be answered (and
// undone); a Close that some parked wait holds up takes all of it.
const closeBound = 4 * time.Second

// Close with a wait of every kind parked (a non-fair acquire, a fair acquire,
// a ticket poll) returns promptly, and every wait is answered.
func TestCloseWithParkedWaitsIsPrompt(t *testing.T) {
	s := newStore(t, store.Options{})
	_, ref := queuedBehind(t, s)
	done := make(chan string, 3)
	go func() {
		_, _ = s.Acquire(as("B"), store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: 30 * time.Second})
		done <- "the non-fair acquire"
	}()
	go func() {
		_, _ = s.Acquire(as("C"), store.AcquireRequest{Name: "x", TTL: time.Minute, Fair: true, Wait: 30 * time.Second})
		done <- "the fair acquire"
	}()
	go func() {
		_, _ = s.Poll(as("A"), ref, 30*time.Second)
		done <- "the poll"
	}()
	awaitCond(t, "three waits parked", func() bool { return s.LocalWaiters("x") == 3 })
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > closeBound {
		t.Fatalf("Close took %v with three waits parked", took.Round(time.Millisecond))
	}
	for range 3 {
		select {
		case what := <-done:
			t.Logf("%s answered", what)
		case <-time.After(answerBound):
			t.Fatalf("a parked wait not answered %v after Close", answerBound)
		}
	}
}

// An acquire's call is on its way to Redis when its client leaves and Close
// takes over; the call then grants. The request's answer cannot reach anyone,
// so that hold must be ended, and Close must not return before it is (what
// ends it is held up a little too): a gateway that stopped leaves no hold
// nobody knows.
func TestCloseRightAfterAGrantWhoseClientLeftLeavesNoHold(t *testing.T) {
	prefix := closePrefix("cg")
	rdb, err := redisconn.NewClient(shared.URL())
	if err != nil {
		t.Fatal(err)
	}
	h := faulthook.Install(rdb)
	s := store.New(rdb, store.Options{Prefix: prefix, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	t.Cleanup(h.Close)
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Both arrive inside the read timeout: the store gets their replies.
	onItsWay := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.Stall, Delay: time.Second})
	h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.Stall, Delay: 300 * time.Millisecond})
	ctx, leave := context.WithCancel(as("A"))
	defer leave()
	a := request(ctx, s, store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A"})
	caught(t, onItsWay, "A's acquire")
	leave()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ans := answered(t, "A", a); ans.res.Lease != nil {
		t.Fatalf("A, gone, was answered a lease (fence %d)", ans.res.Lease.Fence)
	}
	if st := stateOf(t, newStore(t, store.Options{Prefix: prefix}), "x"); st.Held {
		t.Fatalf("after Close, the lock is held (fence %d, %v of its ttl left) for A, which left before its answer",
			st.Fence, st.TTL.Round(time.Millisecond))
	}
}

// Close waits for the calls in flight and undoes what they may have granted:
// an acquire sent to a frozen Redis during shutdown leaves no hold once Redis
// resumes within the wait.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "cl"
	rdb, err := redisconn.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := store.New(rdb, store.Options{Prefix: prefix, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "x", TTL: 10 * time.Minute})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the call reach the frozen Redis
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in flight")
	case <-time.After(time.Second):
	}
	// The call times out (twice: it is sent again once its deadline has
	// passed); Close still waits, for the undo of what it may have been
	// granted, until Redis answers.
	if err := <-done; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("acquire during the freeze: %v, want ErrUnavailable", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned before the timed-out acquire was undone")
	case <-time.After(200 * time.Millisecond):
	}
	srv.Thaw()
	<-closed
	other := newStoreOn(t, srv, store.Options{Prefix: prefix})
	if st, err := other.State(context.Background(), "x"); err != nil || st.Held {
		t.Fatalf("lock after Close: %+v %v: a hold nobody knows", st, err)
	}
}
