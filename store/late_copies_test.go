package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/faulthook"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// Late copies of a request's calls. A call whose connection broke may still
// reach Redis later (held up in the network, or in a Redis that froze), while
// the store sends the request again, answers it, and its client acts on that
// answer. Whatever such a copy does when it arrives must give nobody a hold or
// a place in the queue that nobody was told of. These tests hold back one call
// of a request (faulthook.HoldBack), let the store answer the request, and
// deliver that call once the client has acted on the answer. They look at the
// store only through its answers and the lock's state.

// stateOf is the lock's state, asked by a client the test does not fault.
func stateOf(t *testing.T, s *store.Store, name string) store.State {
	t.Helper()
	st, err := s.State(as("T"), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// nothingLeft fails unless the lock is neither held nor queued for, now that
// everything a client was told of has ended.
func nothingLeft(t *testing.T, s *store.Store, name, what string) {
	t.Helper()
	st := stateOf(t, s, name)
	if st.Held || st.Waiters > 0 {
		t.Fatalf("%s: the lock is held %v (fence %d, %v of its ttl left) with %d queued, and nobody was told of that hold or ticket",
			what, st.Held, st.Fence, st.TTL.Round(time.Millisecond), st.Waiters)
	}
}

// heldBack arms a rule that holds back the next call on x made for who.
func heldBack(h *faulthook.Hook, who string) *faulthook.Fault {
	return h.Arm(faulthook.Rule{Lock: "x", Tag: who, Action: faulthook.HoldBack})
}

func holdKind(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

// The reply to an acquire's first attempt is lost after it ran: the store
// sends it again, and the retry answers the hold the first attempt made. The
// request makes one hold, counted once, and once its client releases that
// hold the lock is free for anyone.
func TestRetryAfterALostReplyAnswersTheHoldItsFirstAttemptMade(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(holdKind(shared), func(t *testing.T) {
			s, h := faultyStore(t, store.Options{})
			lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Action: faulthook.DropReply})
			res, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Shared: shared})
			if err != nil || res.Lease == nil {
				t.Fatalf("A, whose first attempt's reply was lost: %+v %v, want the hold that attempt made", res, err)
			}
			if lost.Count() != 1 {
				t.Fatalf("%d replies lost, want the first attempt's", lost.Count())
			}
			st := stateOf(t, s, "x")
			if st.Holders != 1 || st.Count != 1 || st.Fence != res.Lease.Fence {
				t.Fatalf("after one request: %d holders, count %d, fence %d; want the one hold A was answered (fence %d), counted once",
					st.Holders, st.Count, st.Fence, res.Lease.Fence)
			}
			if _, err := s.Release(as("A"), store.Ref{Name: "x", ID: res.Lease.ID}); err != nil {
				t.Fatal(err)
			}
			nothingLeft(t, s, "x", "A released its only hold")
			if _, err := s.Acquire(as("B"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "B"}); err != nil {
				t.Fatalf("B, exclusive, once A's only hold was released: %v", err)
			}
		})
	}
}

// An acquire's first attempt is held up in the network; the store sends it
// again, and the client is answered the lease. That hold ends (released, or
// run out); then the first attempt reaches Redis. It must grant nothing.
func TestLateCopyOfAnAcquireGrantsNothingOnceItsHoldEnded(t *testing.T) {
	for _, shared := range []bool{false, true} {
		for _, ranOut := range []bool{false, true} {
			name := holdKind(shared) + map[bool]string{false: "/released", true: "/ran_out"}[ranOut]
			t.Run(name, func(t *testing.T) {
				s, h := faultyStore(t, store.Options{})
				ttl := time.Minute
				if ranOut {
					ttl = 300 * time.Millisecond
				}
				first := heldBack(h, "A")
				res, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: ttl, Owner: "A", Shared: shared})
				if err != nil || res.Lease == nil {
					t.Fatalf("A, its first attempt held up: %+v %v, want the lease", res, err)
				}
				if first.Count() != 1 {
					t.Fatal("A's first attempt was never held up")
				}
				if ranOut {
					awaitCond(t, "A's hold to run out", func() bool { return !stateOf(t, s, "x").Held })
				} else if _, err := s.Release(as("A"), store.Ref{Name: "x", ID: res.Lease.ID}); err != nil {
					t.Fatal(err)
				}
				delivered(t, "A's first attempt", first.Deliver())
				nothingLeft(t, s, "x", "after A's first attempt arrived late")
			})
		}
	}
}

// A non-fair acquire (with an Idempotency-Key or not, with a wait or not)
// whose first attempt is held up: the store sends it again, the lock is held,
// and the client is told so (423: it holds nothing). The holder releases; then
// the first attempt reaches Redis. It must grant nothing: nobody would know
// that hold. With a key, the client's next request with it is a fresh attempt.
func TestLateCopyOfAnAcquireAnsweredBusyGrantsNothing(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		for _, waited := range []bool{false, true} {
			name := map[bool]string{false: "plain", true: "keyed"}[keyed] + map[bool]string{false: "/no_wait", true: "/waited"}[waited]
			t.Run(name, func(t *testing.T) {
				s, h := faultyStore(t, store.Options{})
				hl := mustAcquire(t, s, "H", "x")
				req := store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A"}
				if keyed {
					req.IdemKey, req.BodyHash = "k", "b"
				}
				if waited {
					req.Wait = 200 * time.Millisecond
				}
				first := heldBack(h, "A")
				if _, err := s.Acquire(as("A"), req); !errors.Is(err, store.ErrLockHeld) {
					t.Fatalf("A, its first attempt held up, the lock held: %v, want the lock held", err)
				}
				if first.Count() != 1 {
					t.Fatal("A's first attempt was never held up")
				}
				if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
					t.Fatal(err)
				}
				delivered(t, "A's first attempt", first.Deliver())
				nothingLeft(t, s, "x", "A was told the lock was held, and its first attempt arrived late")
				if keyed {
					res, err := s.Acquire(as("A again"), req)
					if err != nil || res.Lease == nil || res.Replayed {
						t.Fatalf("A's next request with its key: %+v %v, want a fresh grant (the request answered 423 made nothing)", res, err)
					}
				}
			})
		}
	}
}

// A fair acquire without a wait whose first attempt is held up: the store
// sends it again, and the client gets a ticket, polls, is granted, releases.
// Then the first attempt reaches Redis: it must neither grant the lock (under
// the request's own lease, which nobody knows) nor queue the ticket again
// behind a new holder (a ticket nobody polls, granted in turn and kept for
// its claim window).
func TestLateCopyOfAQueuedFairAcquireNeitherGrantsNorQueues(t *testing.T) {
	for _, heldAfter := range []bool{false, true} {
		t.Run(map[bool]string{false: "free", true: "held"}[heldAfter], func(t *testing.T) {
			s, h := faultyStore(t, store.Options{})
			hl := mustAcquire(t, s, "H", "x")
			first := heldBack(h, "A")
			res, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true})
			if err != nil || res.Ticket == nil {
				t.Fatalf("A, fair, its first attempt held up: %+v %v, want a ticket", res, err)
			}
			if first.Count() != 1 {
				t.Fatal("A's first attempt was never held up")
			}
			if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
				t.Fatal(err)
			}
			p, err := s.Poll(as("A"), store.Ref{Name: "x", ID: res.Ticket.ID}, 0)
			if err != nil || p.Lease == nil {
				t.Fatalf("A's poll: %+v %v, want the lease", p, err)
			}
			if _, err := s.Release(as("A"), store.Ref{Name: "x", ID: p.Lease.ID}); err != nil {
				t.Fatal(err)
			}
			var b *store.Lease
			if heldAfter {
				b = mustAcquire(t, s, "B", "x")
			}
			delivered(t, "A's first attempt", first.Deliver())
			if b != nil {
				st := stateOf(t, s, "x")
				if st.Waiters > 0 {
					t.Fatalf("A's first attempt, arriving late, queued its ticket again behind B: %d queued, and nobody polls that ticket", st.Waiters)
				}
				if st.Holders != 1 || st.Fence != b.Fence {
					t.Fatalf("A's first attempt, arriving late: %d holders, fence %d; want B's hold alone (fence %d)", st.Holders, st.Fence, b.Fence)
				}
				if _, err := s.Release(as("B"), store.Ref{Name: "x", ID: b.ID}); err != nil {
					t.Fatal(err)
				}
			}
			nothingLeft(t, s, "x", "after A's first attempt arrived late")
		})
	}
}

// A fair acquire with a wait whose first try (before any ticket) is held up:
// the store sends it again, the lock is held, the wait queues a ticket and is
// granted when the holder releases; the client releases. Then the first try
// reaches Redis: it must grant nothing under the request's own lease, which
// nobody knows.
func TestLateFirstTryOfAFairWaitGrantsNothing(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	hl := mustAcquire(t, s, "H", "x")
	first := heldBack(h, "A")
	a := request(as("A"), s, store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: true, Wait: 20 * time.Second})
	caught(t, first, "A's first try")
	awaitCond(t, "A's ticket to be queued", func() bool { return stateOf(t, s, "x").Waiters == 1 })
	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	ans := answered(t, "A", a)
	if ans.err != nil || ans.res.Lease == nil {
		t.Fatalf("A's fair wait: %+v %v, want the lease once H released", ans.res, ans.err)
	}
	if _, err := s.Release(as("A"), store.Ref{Name: "x", ID: ans.res.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	delivered(t, "A's first try", first.Deliver())
	nothingLeft(t, s, "x", "after A's first try arrived late")
}

// A ticket poll whose first attempt is held up: the store sends it again, the
// ticket is still queued, and the wait ends ungranted (the client is told so).
// The holder releases: the lock is granted to the ticket and kept for its next
// poll for at most the ticket ttl. Then the first attempt of the poll reaches
// Redis: it must not claim the grant for the lease's full ttl (its answer went
// nowhere; should the client not come back, the lock would stay held for the
// lease's ttl instead of passing on). The client's next poll gets the lease.
func TestLateCopyOfAPollDoesNotClaimTheGrant(t *testing.T) {
	const ticketTTL = 5 * time.Second
	s, h := faultyStore(t, store.Options{TicketTTL: ticketTTL})
	hl := mustAcquire(t, s, "H", "x")
	q, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Hour, Owner: "A", Fair: true})
	if err != nil || q.Ticket == nil {
		t.Fatalf("A, fair: %+v %v, want a ticket", q, err)
	}
	ref := store.Ref{Name: "x", ID: q.Ticket.ID}
	first := heldBack(h, "A")
	p, err := s.Poll(as("A"), ref, 200*time.Millisecond)
	if err != nil || p.Ticket == nil {
		t.Fatalf("A's poll, its first attempt held up: %+v %v, want still queued", p, err)
	}
	if first.Count() != 1 {
		t.Fatal("the poll's first attempt was never held up")
	}
	if _, err := s.Release(as("H"), store.Ref{Name: "x", ID: hl.ID}); err != nil {
		t.Fatal(err)
	}
	delivered(t, "the poll's first attempt", first.Deliver())
	if st := stateOf(t, s, "x"); st.TTL > ticketTTL {
		t.Fatalf("after the poll's first attempt arrived late, the grant nobody was answered is kept %v (the ticket ttl is %v)",
			st.TTL.Round(time.Millisecond), ticketTTL)
	}
	if p, err := s.Poll(as("A"), ref, 0); err != nil || p.Lease == nil {
		t.Fatalf("A's next poll: %+v %v, want the lease", p, err)
	}
}

// An acquire's first attempt runs in Redis (it grants) and its reply is lost;
// the store's second attempt reaches Redis only after its "not after" (the
// network held it up past the call's budget, though inside the read timeout)
// and changes nothing. The client is told the acquire failed, so the hold the
// first attempt made is known to nobody: it must end within the settle window,
// not last its whole ttl.
func TestRetryThatArrivesTooLateAfterALostGrantLeavesNoHold(t *testing.T) {
	s, h := faultyStore(t, store.Options{})
	// Past the call's "not after" (1.5 s after it is stamped, under the read
	// timeout) and inside the read timeout: the caller gets the reply.
	lateBy := h.ReadTimeout() - 150*time.Millisecond
	lost := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Nth: 1, Action: faulthook.DropReply})
	late := h.Arm(faulthook.Rule{Lock: "x", Tag: "A", Nth: 2, Action: faulthook.Stall, Delay: lateBy})
	res, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A"})
	if lost.Count() != 1 || late.Count() != 1 {
		t.Fatalf("%d replies lost, %d attempts sent late: the faults did not catch both attempts", lost.Count(), late.Count())
	}
	if err == nil {
		t.Fatalf("A, its second attempt too late: answered %+v, want an error", res)
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("A, its second attempt too late: %v, want ErrUnavailable", err)
	}
	freeWithin(t, s, "x", time.Now(), "A was told its acquire failed after its first attempt granted")
}

// timeRefused is a go-redis hook that fails every TIME: the store then has no
// estimate of the Redis clock (as when TIME fails, or on a master it has not
// sampled yet).
type timeRefused struct{}

var errTimeRefused = errors.New("TIME refused by the test")

func (timeRefused) DialHook(next redis.DialHook) redis.DialHook { return next }

func (timeRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "time" {
			cmd.SetErr(errTimeRefused)
			return errTimeRefused
		}
		return next(ctx, cmd)
	}
}

func (timeRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// clocklessStore is a store on the shared Redis whose client cannot read the
// Redis clock, with a fault hook.
func clocklessStore(t *testing.T) (*store.Store, *faulthook.Hook) {
	t.Helper()
	rdb, err := redisconn.NewClient(shared.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(timeRefused{})
	h := faulthook.Install(rdb)
	prefix := "nc" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	s := store.New(rdb, store.Options{Prefix: prefix, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	t.Cleanup(h.Close)
	if err := s.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, h
}

// A store that cannot read the Redis clock cannot give its calls a "not
// after". Whatever it does then (refuse, or grant), the first attempt of an
// acquire, held up in the network and delivered once the client has released
// what it was given, must grant nothing and queue nothing.
func TestLateCopyFromAStoreWithoutAClockEstimateGrantsNothing(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "non_fair", true: "fair"}[fair], func(t *testing.T) {
			s, h := clocklessStore(t)
			first := heldBack(h, "A")
			res, err := s.Acquire(as("A"), store.AcquireRequest{Name: "x", TTL: time.Minute, Owner: "A", Fair: fair})
			switch {
			case err != nil:
				if !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("A without a clock estimate: %v, want ErrUnavailable or a lease", err)
				}
				t.Logf("A refused: %v", err)
			case res.Lease != nil:
				if _, err := s.Release(as("A"), store.Ref{Name: "x", ID: res.Lease.ID}); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("A on a free lock: %+v, want a lease or an error", res)
			}
			delivered(t, "A's first attempt", first.Deliver())
			nothingLeft(t, s, "x", "after A's first attempt arrived late")
		})
	}
}
