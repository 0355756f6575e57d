package store_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// These tests check the contract around calls whose outcome the gateway does
// not know (a broken connection, a lost reply, a stall past the read timeout,
// a client that hung up), whatever the store does inside to keep it: at most
// one exclusive holder at a time, a hold whose lease a client was given lasts
// until it is released or runs out, and a hold nobody was told of ends within
// the settle window. They look at the store only through its answers.

// settleWindow bounds how long a hold nobody was told of may live: the target
// is about 2 s, and a loaded machine gets the rest.
const settleWindow = 5 * time.Second

// faultyStore is a store on the shared Redis whose client carries a fault
// hook. Requests a test makes go under a tag (as); what the store does on its
// own goes untagged.
func faultyStore(t *testing.T, opt store.Options) (*store.Store, *faulthook.Hook) {
	t.Helper()
	rdb, err := redisconn.NewClient(shared.URL())
	if err != nil {
		t.Fatal(err)
	}
	h := faulthook.Install(rdb)
	opt.Prefix = "uo" + strconv.FormatInt(unknownPrefixes.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	opt.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s := store.New(rdb, opt)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	t.Cleanup(h.Close) // runs first: the store closes on a client without faults
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, h
}

var unknownPrefixes atomic.Int64

// as is a context for the requests of one client of the test.
func as(who string) context.Context { return faulthook.Tag(context.Background(), who) }

// mustAcquire acquires name as who, for a minute.
func mustAcquire(t *testing.T, s *store.Store, who, name string) *store.Lease {
	t.Helper()
	res, err := s.Acquire(as(who), store.AcquireRequest{Name: name, TTL: time.Minute, Owner: who})
	if err != nil || res.Lease == nil {
		t.Fatalf("%s: acquire %s: %+v %v", who, name, res, err)
	}
	return res.Lease
}

// answer is what a request was answered.
type answer struct {
	res store.AcquireResult
	err error
}

// request sends an acquire on its own goroutine; its answer comes on the
// channel. A store may keep a request until it knows what the request's calls
// did, so the tests never block on an answer they do not need.
func request(ctx context.Context, s *store.Store, r store.AcquireRequest) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		res, err := s.Acquire(ctx, r)
		ch <- answer{res, err}
	}()
	return ch
}

// answerBound is how long a test waits for an answer it can go on without.
const answerBound = 10 * time.Second

// notGranted waits (for at most answerBound) for the answer of who, a request
// made while the lock is held by another, and fails the test if it was given
// a lease. A request not answered by then is logged and left.
func notGranted(t *testing.T, who string, ch <-chan answer) {
	t.Helper()
	select {
	case a := <-ch:
		if a.res.Lease != nil {
			t.Fatalf("%s was given a lease (fence %d), which it cannot have here", who, a.res.Lease.Fence)
		}
		t.Logf("%s answered %+v, %v", who, a.res, a.err)
	case <-time.After(answerBound):
		t.Logf("%s not answered after %v: going on", who, answerBound)
	}
}

// answered waits for the answer of who, a request the test needs answered,
// for at most answerBound.
func answered(t *testing.T, who string, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(answerBound):
		t.Fatalf("%s not answered after %v", who, answerBound)
	}
	return answer{}
}

// caught waits for a fault to catch its call.
func caught(t *testing.T, f *faulthook.Fault, what string) {
	t.Helper()
	select {
	case <-f.Caught():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached Redis", what)
	}
}

// delivered logs the late copies a test delivered.
func delivered(t *testing.T, what string, ds []faulthook.Delivery) {
	t.Helper()
	for _, d := range ds {
		t.Logf("%s delivered late: %s", what, d)
	}
}

// neverGrantedBeside tries, as C, to acquire the lock now and then for the
// settle window, while b holds a lease of it (for a minute) that nobody
// released: C must never be granted. Then b's release must succeed.
func neverGrantedBeside(t *testing.T, s *store.Store, b *store.Lease) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < settleWindow {
		res, err := s.Acquire(as("C"), store.AcquireRequest{Name: b.Name, TTL: time.Minute, Owner: "C"})
		if res.Lease != nil {
			_, berr := s.Lease(as("B"), store.Ref{Name: b.Name, ID: b.ID})
			t.Fatalf("C was granted (fence %d) %v after the late copies, while B holds a lease (fence %d, a minute's ttl, "+
				"never released): two holders; B's lease now looks %v",
				res.Lease.Fence, time.Since(start).Round(time.Millisecond), b.Fence, errOr(berr, "held"))
		}
		if !errors.Is(err, store.ErrLockHeld) {
			t.Fatalf("C: %v, want the lock held", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.Release(as("B"), store.Ref{Name: b.Name, ID: b.ID}); err != nil {
		t.Fatalf("B's release, %v after the late copies and well inside its ttl: %v", time.Since(start).Round(time.Millisecond), err)
	}
}

// freeWithin fails the test unless the lock, which nobody the test made was
// told holds, is free within the settle window from since.
func freeWithin(t *testing.T, s *store.Store, name string, since time.Time, what string) {
	t.Helper()
	for {
		st, err := s.State(as("T"), name)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held {
			return
		}
		if time.Since(since) > settleWindow {
			t.Fatalf("%s: the lock is still held %v later (fence %d, %v of its ttl left), and nobody was told of that hold",
				what, time.Since(since).Round(time.Millisecond), st.Fence, st.TTL.Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

// H holds. A, with an Idempotency-Key, sends its first attempt, which is held
// up in the network (its connection broke): A is answered (the lock is held).
// What the store does about A on its own is held up too. H releases; A's
// first attempt reaches Redis; B, a retry with A's key, is answered with a
// lease; then whatever the store did about A on its own reaches Redis. B must
// stay the only holder until it releases.
func TestLateCopyOfAKeyedRequestAnsweredBusyNeverMakesASecondHolder(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")

	first := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.HoldBack})
	background := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k1", BodyHash: "b1"}
	a := request(as("A"), s, req)
	caught(t, first, "A's first attempt")
	notGranted(t, "A", a)

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	delivered(t, "A's first attempt", first.Deliver())
	ab := answered(t, "B", request(as("B"), s, req))
	b := ab.res
	if ab.err != nil || b.Lease == nil {
		t.Fatalf("B, A's retry on a free lock: %+v %v, want a lease", b, ab.err)
	}
	t.Logf("B answered a lease, fence %d, replayed %v", b.Lease.Fence, b.Replayed)
	delivered(t, "the store's own call", background.Deliver())
	neverGrantedBeside(t, s, b.Lease)
}

// A fair request A with an Idempotency-Key waits in the queue behind H. A's
// client hangs up; whatever ends A's wait (a call on A's behalf, or one the
// store makes on its own) is held up. H releases: A's ticket is granted. B,
// A's retry with its key, is answered with that lease. Then the calls that
// end A's wait reach Redis: they must not take B's lease back, so C is never
// granted while B holds.
func TestDelayedEndOfAHungUpFairWaitNeverTakesBackTheLeaseItsRetryWasGiven(t *testing.T) {
	s, h := faultyStore(t, store.Options{TicketTTL: time.Second})
	hl := mustAcquire(t, s, "H", "x")

	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true, Wait: 30 * time.Second,
		IdemKey: "k2", BodyHash: "b2"}
	ctxA, hangUp := context.WithCancel(as("A"))
	defer hangUp()
	a := request(ctxA, s, req)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		st, err := s.State(as("T"), "x")
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == 1 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("A never queued")
		}
	}

	endA := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.HoldBack})
	endBg := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	hangUp()
	notGranted(t, "A, hung up,", a)

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	ab := answered(t, "B", request(as("B"), s, req))
	b := ab.res
	if ab.err != nil {
		t.Fatalf("B, A's retry: %v", ab.err)
	}
	if b.Lease == nil && b.Ticket != nil { // queued again: its wait answers the grant
		p, err := s.Poll(as("B"), store.Ref{Name: "x", ID: b.Ticket.ID}, settleWindow)
		if err != nil || p.Lease == nil {
			t.Fatalf("B's poll: %+v %v, want the lease", p, err)
		}
		b.Lease = p.Lease
	}
	if b.Lease == nil {
		t.Fatalf("B, A's retry after H released: %+v, want a lease", b)
	}
	t.Logf("B answered a lease, fence %d, replayed %v", b.Lease.Fence, b.Replayed)
	delivered(t, "a call on A's behalf", endA.Deliver())
	delivered(t, "the store's own call", endBg.Deliver())
	neverGrantedBeside(t, s, b.Lease)
}

// H holds. A1 and A2, two requests with one Idempotency-Key, each have their
// first attempt held up in the network, and each is answered (the lock is
// held): neither was told of any hold. Once the store is done with them on its
// own, H releases and the two first attempts reach Redis. Whatever they do, no
// hold may outlive the settle window.
func TestTwoKeyedRequestsAnsweredBusyLeaveNoHoldNobodyKnows(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")

	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k3", BodyHash: "b3"}
	var firsts []*faulthook.Fault
	for _, who := range []string{"A1", "A2"} {
		f := h.Arm(faulthook.Rule{Lock: "x", Tag: who, Action: faulthook.HoldBack})
		a := request(as(who), s, req)
		caught(t, f, who+"'s first attempt")
		notGranted(t, who, a)
		firsts = append(firsts, f)
	}
	if !h.WaitQuiet("x", 300*time.Millisecond, 20*time.Second) {
		t.Fatal("the store never stopped calling Redis about x")
	}

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	for i, f := range firsts {
		delivered(t, "A"+strconv.Itoa(i+1)+"'s first attempt", f.Deliver())
	}
	freeWithin(t, s, "x", time.Now(), "after two busy answers and their late first attempts")
}

// H holds. A, with an Idempotency-Key, has both its attempts held up in the
// network and is answered (503 today). A's client retries with its key, is
// answered the lock is held, and stops, as any client would. H releases; A's
// attempts reach Redis. Nobody was told of a hold: the lock must be free
// within the settle window.
func TestLateCopiesOfAKeyedRequestWhoseRetryWasAnsweredBusyLeaveNoHoldNobodyKnows(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")

	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k4", BodyHash: "b4"}
	first := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Nth: 1, Action: faulthook.HoldBack})
	second := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Nth: 2, Action: faulthook.HoldBack})
	a := request(as("A"), s, req)
	caught(t, first, "A's first attempt")
	notGranted(t, "A", a)
	notGranted(t, "A's retry", request(as("A again"), s, req))

	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	delivered(t, "A's first attempt", first.Deliver())
	delivered(t, "A's second call", second.Deliver())
	freeWithin(t, s, "x", time.Now(), "after A's late attempts")
}

// Every call on lock a stalls past the read timeout, whoever makes it: four
// requests on a whose clients give up leave the store work to do there that
// cannot end. Meanwhile a plain request on lock b is granted after its client
// left: nobody knows that hold, and the stalled work on a must not keep it
// from ending within the settle window.
func TestStalledWorkOnOneLockDoesNotDelayEndingAnUnknownHoldOnAnother(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	stall := h.ReadTimeout() + 500*time.Millisecond
	onA := h.Arm(faulthook.Rule{Lock: "a", Every: true, Action: faulthook.Stall, Delay: stall})
	var gone []<-chan answer
	for i := range 4 {
		ctx, cancel := context.WithTimeout(as("a"+strconv.Itoa(i)), 300*time.Millisecond)
		defer cancel()
		gone = append(gone, request(ctx, s, store.AcquireRequest{Name: "a", TTL: time.Minute}))
	}
	for i, ch := range gone {
		notGranted(t, "request "+strconv.Itoa(i)+" on a", ch)
	}
	t.Logf("%d calls on a stalled so far", onA.Count())

	onB := h.Arm(faulthook.Rule{Lock: "b", Tag: "B", Action: faulthook.Stall, Delay: 300 * time.Millisecond})
	ctxB, leave := context.WithCancel(as("B"))
	defer leave()
	b := request(ctxB, s, store.AcquireRequest{Name: "b", TTL: time.Minute, Owner: "B"})
	caught(t, onB, "B's call")
	left := time.Now()
	leave()
	select {
	case a := <-b:
		t.Logf("B, gone, answered %+v, %v", a.res, a.err)
	case <-time.After(answerBound):
		t.Logf("B, gone, not answered after %v: going on", answerBound)
	}
	freeWithin(t, s, "b", left, "B's client left while its call was on its way")
}

// A client already gone when its request reaches the store creates nothing: no
// grant, no ticket.
func TestNothingForAClientGone(t *testing.T) {
	prefix := "gone" + time.Now().Format("150405.000000")
	s := newStore(t, store.Options{Prefix: prefix})
	rdb := shared.Client(t)
	bg := context.Background()
	h, err := s.Acquire(bg, store.AcquireRequest{Name: "busy", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	for _, r := range []store.AcquireRequest{
		{Name: "free", TTL: time.Minute},
		{Name: "free", TTL: time.Minute, Fair: true},
		{Name: "busy", TTL: time.Minute, Fair: true},
		{Name: "busy", TTL: time.Minute, Fair: true, Wait: time.Second},
		{Name: "busy", TTL: time.Minute, Wait: time.Second},
	} {
		if _, err := s.Acquire(ctx, r); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%+v: error %v, want ErrUnavailable (client gone)", r, err)
		}
	}
	keys := rdb.Keys(bg, prefix+":*").Val()
	for _, k := range keys {
		if k != s.LockKey("busy") {
			t.Errorf("key %s left by a client already gone", k)
		}
	}
	if st, err := s.State(bg, "busy"); err != nil || st.Holders != 1 || st.Waiters != 0 || st.Fence != h.Lease.Fence {
		t.Errorf("busy after clients already gone asked for it: %+v %v, want only the holder", st, err)
	}
}

// A call that never left the process is a definite failure: with Redis gone,
// an acquire's dial is refused (and then the health gate refuses the calls
// after it), so nothing was sent that could run later, and there is nothing
// to undo and no tombstone to leave. (A Redis outage refuses thousands of
// calls: an undo and a tombstone for each would be work and keys for nothing.)
func TestRefusedCallLeavesNothingToUndo(t *testing.T) {
	for _, gated := range []bool{false, true} {
		srv := redistest.Start(t)
		var s *store.Store
		if gated {
			rdb, gate, err := redisconn.NewGatedClient(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			s = store.New(rdb, store.Options{Prefix: "rf", Gate: gate, Logger: zerolog.New(zerolog.NewTestWriter(t))})
			t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
		} else {
			s = newStoreOn(t, srv, store.Options{})
		}
		ctx := context.Background()
		held, err := s.Acquire(ctx, store.AcquireRequest{Name: "busy", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Acquire(ctx, store.AcquireRequest{Name: "busy", TTL: time.Minute, Fair: true})
		if err != nil || q.Ticket == nil {
			t.Fatalf("enqueue: %+v %v", q, err)
		}
		_ = held
		srv.Kill()
		for i, call := range []func() error{
			func() error { _, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute}); return err },
			func() error {
				_, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Fair: true})
				return err
			},
			func() error { _, err := s.Poll(ctx, store.Ref{Name: "busy", ID: q.Ticket.ID}, 0); return err },
			func() error {
				_, err := s.Poll(ctx, store.Ref{Name: "busy", ID: q.Ticket.ID}, 200*time.Millisecond)
				return err
			},
		} {
			if err := call(); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("gated %v, call %d with Redis gone: %v, want ErrUnavailable", gated, i, err)
			}
			if n := s.PendingUndos(); n != 0 {
				t.Fatalf("gated %v, call %d: %d undos queued for calls that never reached Redis, want none", gated, i, n)
			}
		}
	}
}

// A keyed acquire grants, and every reply to it is lost: the client is told
// it failed, and nobody was told of the hold. That hold ends, and the key is
// forgotten with it: the client's retry with the key is a fresh attempt,
// granted, never "key used".
func TestAKeyedHoldNobodyWasToldOfIsForgottenWithItsKey(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.DropReply})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every reply lost: answered %+v, want an error", res)
	}
	lost.Disarm()
	if lost.Count() == 0 {
		t.Fatal("no reply to A was lost")
	}
	freeWithin(t, s, "x", time.Now(), "A was told its keyed acquire failed")
	res, err := s.Acquire(as("A again"), keyedRequest())
	if err != nil || res.Lease == nil || res.Replayed {
		t.Fatalf("A's retry with its key once the hold nobody knew ended: %+v %v, want a fresh grant", res, err)
	}
}

// A keyed acquire grants and every reply to it is lost; what the store does
// to end that request is held up. B, a retry with the key, is answered that
// hold (replayed). Then the held-up work reaches Redis: it must leave the hold
// B was told of.
func TestUndoOfAKeyedRequestSparesTheHoldARetryWasToldOf(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.DropReply})
	later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every reply lost: answered %+v, want an error", res)
	}
	lost.Disarm()
	caught(t, later, "the store's own work about A")
	b, err := s.Acquire(as("B"), keyedRequest())
	if err != nil || b.Lease == nil || !b.Replayed {
		t.Fatalf("B, A's retry with its key: %+v %v, want A's hold, replayed", b, err)
	}
	delivered(t, "the store's own work about A", later.Deliver())
	stillHeldBy(t, s, "B", b.Lease)
}

// A keyed acquire's attempts are all held up in the network: the client is
// told it failed, and what the store does to end that request is held up too.
// B, a retry with the key, finds the lock free and is granted afresh, under
// the lease every request with the key lands on. Then the held-up work reaches
// Redis: it must end nothing B made, and the key must still name B's hold.
func TestUndoOfAKeyedRequestSparesAFreshHoldMadeWithItsKey(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Every: true, Action: faulthook.HoldBack})
	later := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})
	if res, err := s.Acquire(as("A"), keyedRequest()); err == nil {
		t.Fatalf("A, every attempt held up: answered %+v, want an error", res)
	}
	lost.Disarm()
	caught(t, later, "the store's own work about A")
	b, err := s.Acquire(as("B"), keyedRequest())
	if err != nil || b.Lease == nil || b.Replayed {
		t.Fatalf("B, A's retry with its key, the lock free: %+v %v, want a fresh grant", b, err)
	}
	delivered(t, "the store's own work about A", later.Deliver())
	d, err := s.Acquire(as("D"), keyedRequest())
	if err != nil || d.Lease == nil || !d.Replayed || d.Lease.ID != b.Lease.ID {
		t.Fatalf("D, another retry with the key: %+v %v, want B's hold, replayed", d, err)
	}
	stillHeldBy(t, s, "B", b.Lease)
}

// A retry with an Idempotency-Key replays the hold its first request made. A
// replay whose answer never reached its client told nobody of the hold: when
// the first request's answer was lost too, nobody knows the hold, and it must
// end within the settle window, as a hold whose only request lost its answer
// does.
func TestAHoldWhoseRequestAndItsReplayBothLostTheirAnswersEndsWithinTheSettleWindow(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k", BodyHash: "b"}

	// What the store does on its own (its cleanups) is held up until both
	// requests have run.
	background := h.Arm(faulthook.Rule{Lock: "x", Untagged: true, Every: true, Action: faulthook.HoldBack})

	// A's call runs on a free lock (a grant), and its reply is lost; A's
	// client gives up.
	lostA := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.DropReply})
	ctxA, leaveA := context.WithCancel(as("A"))
	defer leaveA()
	a := request(ctxA, s, req)
	caught(t, lostA, "A's call")
	leaveA()
	notGranted(t, "A, gone,", a)

	// B, A's retry with its key, runs (a replay of A's hold), and its reply is
	// lost too; B's client gives up as well.
	lostB := h.Arm(faulthook.Rule{Lock: "x", Tag: "B", Action: faulthook.DropReply})
	ctxB, leaveB := context.WithCancel(as("B"))
	defer leaveB()
	b := request(ctxB, s, req)
	caught(t, lostB, "B's call")
	leaveB()
	notGranted(t, "B, gone,", b)

	since := time.Now()
	delivered(t, "the store's own calls", background.Deliver())
	freeWithin(t, s, "x", since, "a hold whose request and whose replay both lost their answers")
}

// keyedRequest is A's acquire with the key k.
func keyedRequest() store.AcquireRequest {
	return store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", IdemKey: "k", BodyHash: "b"}
}

// stillHeldBy fails unless who still holds l with most of its minute left, C
// cannot take the lock, and who's release succeeds.
func stillHeldBy(t *testing.T, s *store.Store, who string, l *store.Lease) {
	t.Helper()
	got, err := s.Lease(as(who), store.Ref{Name: l.Name, ID: l.ID})
	if err != nil {
		t.Fatalf("%s's lease (fence %d), never released: %v", who, l.Fence, err)
	}
	if got.TTL < 50*time.Second {
		t.Fatalf("%s's lease has %v left of its minute", who, got.TTL.Round(time.Millisecond))
	}
	if c, err := s.Acquire(as("C"), store.AcquireRequest{Name: l.Name, TTL: time.Minute, Owner: "C"}); !errors.Is(err, store.ErrLockHeld) {
		t.Fatalf("C, while %s holds: %+v %v, want the lock held", who, c, err)
	}
	if _, err := s.Release(as(who), store.Ref{Name: l.Name, ID: l.ID}); err != nil {
		t.Fatalf("%s's release: %v", who, err)
	}
}
