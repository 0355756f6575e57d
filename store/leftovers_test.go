package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/store"
)

// After a name's last hold and ticket end, Redis keeps its lock key (for the
// fence) for no more than the fence guard (counted from the last grant), and
// nothing else: not a key kept for
// the rest of a lease released early, nor one kept for the life of a ticket
// that went early (cancelled, or its waiter hung up).
func TestNothingStaysBehind(t *testing.T) {
	const guard = time.Second
	prefix := "left" + time.Now().Format("150405.000000")
	const ticketTTL = 10 * time.Second
	s := newStore(t, store.Options{Prefix: prefix, FenceGuard: guard, TicketTTL: ticketTTL})
	rdb := shared.Client(t)
	ctx := context.Background()
	// With its clock estimate, so that every call carries its deadline.
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	acquire := func(ctx context.Context, r store.AcquireRequest) store.AcquireResult {
		t.Helper()
		res, err := s.Acquire(ctx, r)
		if err != nil {
			t.Fatalf("acquire %+v: %v", r, err)
		}
		return res
	}
	release := func(name, id string) {
		t.Helper()
		if _, err := s.Release(ctx, store.Ref{Name: name, ID: id}); err != nil {
			t.Fatal(err)
		}
	}

	// A long lease, released at once.
	l := acquire(ctx, store.AcquireRequest{Name: "long", TTL: time.Hour})
	release("long", l.Lease.ID)

	// A fair waiter that hangs up while it waits, then the holder releases.
	h := acquire(ctx, store.AcquireRequest{Name: "hung", TTL: 5 * time.Second})
	wctx, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(wctx, store.AcquireRequest{Name: "hung", TTL: time.Minute, Fair: true, Wait: 30 * time.Second})
		done <- err
	}()
	for s.LocalWaiters("hung") == 0 || rdb.Exists(ctx, prefix+":{hung}:q").Val() == 0 {
		time.Sleep(time.Millisecond) // nothing announces the ticket's creation
	}
	hangUp()
	<-done
	release("hung", h.Lease.ID)

	// A ticket cancelled while the lock is held, then the holder releases.
	c := acquire(ctx, store.AcquireRequest{Name: "cancel", TTL: time.Minute})
	q := acquire(ctx, store.AcquireRequest{Name: "cancel", TTL: time.Minute, Fair: true})
	if err := s.Cancel(ctx, store.Ref{Name: "cancel", ID: q.Ticket.ID}); err != nil {
		t.Fatal(err)
	}
	release("cancel", c.Lease.ID)

	// A ticket polled and cancelled, the holder releasing afterwards.
	p := acquire(ctx, store.AcquireRequest{Name: "polled", TTL: time.Minute})
	pq := acquire(ctx, store.AcquireRequest{Name: "polled", TTL: time.Minute, Fair: true})
	if _, err := s.Poll(ctx, store.Ref{Name: "polled", ID: pq.Ticket.ID}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, store.Ref{Name: "polled", ID: pq.Ticket.ID}); err != nil {
		t.Fatal(err)
	}
	release("polled", p.Lease.ID)

	// A ticket handed the lock while its owner was not polling, who never comes
	// back: the grant is kept for its claim for the ticket ttl, then passes on
	// (here to nobody). The fence key is kept for the claim window, not for the
	// minute the lease would have had, had it been claimed.
	u := acquire(ctx, store.AcquireRequest{Name: "unclaimed", TTL: time.Minute})
	acquire(ctx, store.AcquireRequest{Name: "unclaimed", TTL: time.Minute, Fair: true})
	release("unclaimed", u.Lease.ID)
	if pttl := rdb.PTTL(ctx, s.LockKey("unclaimed")).Val(); pttl > ticketTTL {
		t.Errorf("the lock key of a grant waiting for its claim lives %v, more than the claim window %v", pttl, ticketTTL)
	}

	for _, k := range rdb.Keys(ctx, prefix+":*").Val() {
		if k == prefix+":secret" {
			continue // Ready's: the store's, of no name
		}
		if strings.Contains(k, "{unclaimed}") {
			continue // its grant waits for its claim
		}
		pttl := rdb.PTTL(ctx, k).Val()
		switch {
		case strings.HasSuffix(k, "}"):
			if pttl > guard {
				t.Errorf("lock key %s lives %v more after the name's last hold and ticket ended, want at most the guard %v", k, pttl, guard)
			}
		default:
			t.Errorf("%s (pttl %v) left after the name's last hold and ticket ended", k, pttl)
		}
	}
}
