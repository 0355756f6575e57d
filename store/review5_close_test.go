package store

import (
	"context"
	"testing"
	"time"
)

// Close (without a Shutdown before it) while a fair acquire waits on the ticket
// it queued: the wait's last look runs once the store is closed, is refused,
// and the client is answered an error; the ticket, which nobody was told of,
// stays queued, is granted in turn and blocks the lock for its claim window.
// Either the client gets its ticket, or the ticket goes.
func TestReview5CloseDuringAFairWaitLeavesNoTicketNobodyKnows(t *testing.T) {
	s, _, srv := review5Store(t, "r5c")
	ctx := context.Background()
	a, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res AcquireResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Fair: true, Wait: 10 * time.Second})
		got <- answer{res, err}
	}()
	for end := time.Now().Add(5 * time.Second); s.LocalWaiters("x") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the fair acquire never waited")
		}
	}
	time.Sleep(50 * time.Millisecond) // its ticket is queued
	_ = s.Close()
	ans := <-got
	if ans.res.Ticket != nil || ans.res.Lease != nil {
		return // the client knows what it has
	}
	// Nobody knows a ticket: a second store sees none once the holder releases.
	s2, _, _ := review5StoreOn(t, srv, "r5c")
	st, err := s2.State(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiters > 0 {
		t.Fatalf("the fair acquire was answered %v, and its ticket stays queued (%d waiting), known to nobody", ans.err, st.Waiters)
	}
	_ = a
}

// Close with waits of every kind parked returns promptly: every request track
// counted ends (none holds Close for closeUndoWait).
func TestReview5CloseWithParkedWaitsIsPrompt(t *testing.T) {
	s, _, _ := review5Store(t, "r5cp")
	ctx := context.Background()
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	q, err := s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Fair: true})
	if err != nil || q.Ticket == nil {
		t.Fatal(q, err)
	}
	done := make(chan struct{}, 4)
	go func() {
		_, _ = s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Wait: 30 * time.Second})
		done <- struct{}{}
	}()
	go func() {
		_, _ = s.Acquire(ctx, AcquireRequest{Name: "x", TTL: time.Minute, Fair: true, Wait: 30 * time.Second})
		done <- struct{}{}
	}()
	go func() { _, _ = s.Poll(ctx, Ref{Name: "x", ID: q.Ticket.ID}, 30*time.Second); done <- struct{}{} }()
	for end := time.Now().Add(5 * time.Second); s.LocalWaiters("x") < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the waits never parked")
		}
	}
	start := time.Now()
	_ = s.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with three waits parked", d)
	}
	for range 3 {
		<-done
	}
}
