package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
)

// A call that never left the process is a definite failure: with Redis gone,
// an acquire's dial is refused (and then the health gate refuses the calls
// after it), so nothing was sent that could run later, and there is nothing
// to undo and no tombstone to leave. (The cleaner used to queue an undo, and a
// tombstone, for every such call: thousands per Redis outage.)
func TestRefusedCallLeavesNothingToUndo(t *testing.T) {
	for _, gated := range []bool{false, true} {
		srv := redistest.Start(t)
		var s *store.Store
		if gated {
			rdb, gate, err := store.NewGatedClient(srv.URL())
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
