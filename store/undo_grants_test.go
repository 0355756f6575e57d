package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
)

// grantedPoll sets up a ticket handed the lock while its poll waited (at its
// full ttl, for that poll): it returns the store, a client, the ticket, the
// lease the poll answered, and the poll's id as Redis knows it (pc).
func grantedPoll(t *testing.T, opt Options) (s *Store, rdb *redis.Client, ticket, lease, pid string) {
	t.Helper()
	srv := redistest.Start(t)
	c, err := NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.Prefix, opt.Logger = "ug", zerolog.New(zerolog.NewTestWriter(t))
	s = New(c, opt)
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	rdb = srv.Client(t)
	ctx := context.Background()
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Fair: true})
	if err != nil || q.Ticket == nil {
		t.Fatalf("enqueue: %+v %v", q, err)
	}
	got := make(chan PollResult, 1)
	go func() {
		res, err := s.Poll(ctx, Ref{Name: "x", ID: q.Ticket.ID}, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	tkey := s.ticketKey("x", hashID(q.Ticket.ID))
	for p := rdb.HGet(ctx, tkey, "p").Val(); p == "" || p == "0"; p = rdb.HGet(ctx, tkey, "p").Val() {
		time.Sleep(time.Millisecond) // nothing outside shows the poll reached Redis
	}
	if _, err := s.Release(ctx, Ref{Name: "x", ID: h.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.Lease == nil {
		t.Fatalf("poll: %+v, want the lease", res)
	}
	pid = rdb.HGet(ctx, s.lockKey("x"), "pc").Val()
	if pid == "" {
		t.Fatal("the grant names no poll it was made for")
	}
	return s, rdb, q.Ticket.ID, res.Lease.ID, pid
}

// unpollOf is the undo of the ticket's poll pid, its answer lost.
func unpollOf(s *Store, ticket, pid string) undo {
	return undo{name: "x", th: hashID(ticket), tlh: hashID(ticketLease(ticket)), poll: true, pid: pid, tomb: true,
		until: s.notAfter(s.lockKey("x"))}
}

// A poll fails without a definite answer on one gateway, whose unpoll reaches
// Redis only after the owner claimed the grant with a poll on another and
// renewed it: the unpoll must leave that lease alone (it cut it to the ticket
// ttl, and the lock went to someone else while its holder still held it).
func TestLateUnpollLeavesAClaimedLease(t *testing.T) {
	s, rdb, ticket, lease, pid := grantedPoll(t, Options{TicketTTL: 2 * time.Second})
	ctx := context.Background()
	again, err := s.Poll(ctx, Ref{Name: "x", ID: ticket}, 0)
	if err != nil || again.Lease == nil {
		t.Fatalf("second poll: %+v %v", again, err)
	}
	if _, err := s.Renew(ctx, Ref{Name: "x", ID: lease}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.runUndo(ctx, unpollOf(s, ticket, pid)); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, s.lockKey("x")).Val(); pttl < 50*time.Second {
		t.Fatalf("lease renewed for a minute has %v left after the late unpoll of an earlier poll", pttl)
	}
	// Without the renewal, the second poll alone shows the grant may have reached its owner.
	if err := s.runUndo(ctx, unpollOf(s, ticket, pid)); err != nil {
		t.Fatal(err)
	}
	if tk := rdb.HGet(ctx, s.lockKey("x"), "tk").Val(); tk != "" {
		t.Fatal("the claimed grant was made unclaimed again")
	}
}

// A ticket's poll was in flight on a gateway that died: the release handed the
// lock to the ticket at its full ttl for that poll, whose answer nobody got.
// The client cancels its ticket: the grant must go with it (DELETE answered
// 410 and the lock stayed held for the whole ttl, known to nobody). Once the
// lease is renewed, its owner has it, and cancel leaves it alone.
func TestCancelFreesAGrantNobodyConfirmed(t *testing.T) {
	s, rdb, ticket, lease, _ := grantedPoll(t, Options{})
	ctx := context.Background()
	if err := s.Cancel(ctx, Ref{Name: "x", ID: ticket}); err != nil {
		t.Fatalf("cancel: %v, want the grant given up", err)
	}
	if n := rdb.Exists(ctx, s.lockKey("x")).Val(); n != 0 {
		t.Fatalf("lock held (%v left) after its only waiter cancelled", rdb.PTTL(ctx, s.lockKey("x")).Val())
	}

	s, rdb, ticket, lease, _ = grantedPoll(t, Options{})
	if _, err := s.Renew(ctx, Ref{Name: "x", ID: lease}, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, Ref{Name: "x", ID: ticket}); err != ErrTicketGone {
		t.Fatalf("cancel after a renewal: %v, want ErrTicketGone", err)
	}
	if n := rdb.Exists(ctx, s.lockKey("x")).Val(); n != 1 {
		t.Fatal("a renewed lease was taken by its ticket's cancel")
	}
}

// An unpoll that runs after the ticket ttl has passed since the grant passes
// the grant on at once (it gave the owner the ticket ttl from its own run), and
// with the name's last hold gone the fence key is cut back to the guard (it was
// kept for the grant's full minute).
func TestLateUnpollPassesAnOldGrantOn(t *testing.T) {
	const tt = 300 * time.Millisecond
	s, rdb, ticket, _, pid := grantedPoll(t, Options{TicketTTL: tt, FenceGuard: time.Second})
	ctx := context.Background()
	at := rdb.HGet(ctx, s.lockKey("x"), "at").Val()
	for now, _ := rdb.Time(ctx).Result(); now.UnixMilli() <= mustInt(t, at)+tt.Milliseconds(); now, _ = rdb.Time(ctx).Result() {
		time.Sleep(10 * time.Millisecond) // the ticket ttl passing on the Redis clock
	}
	if err := s.runUndo(ctx, unpollOf(s, ticket, pid)); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, s.lockKey("x")).Val(); n != 0 {
		t.Fatalf("a grant older than the ticket ttl, undone, is held %v more", rdb.PTTL(ctx, s.lockKey("x")).Val())
	}
	if pttl := rdb.PTTL(ctx, s.keys("x")[1]).Val(); pttl > time.Second {
		t.Fatalf("fence key kept %v after the name's last hold ended, want at most the guard", pttl)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("%q: not a number", s)
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
