package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// Redis dies and comes back: while it is down every call answers
// ErrUnavailable at once, and the first call after Redis answers PING again
// succeeds within 100 ms (go-redis's pool alone keeps failing for up to a
// second after the dials it saw fail).
func TestGateRecovery(t *testing.T) {
	srv := redistest.Start(t)
	rdb, gate, err := redisconn.NewGatedClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := store.New(rdb, store.Options{Prefix: "gate", Gate: gate, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	acquire := func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := s.Acquire(ctx, store.AcquireRequest{Name: "g" + time.Now().Format("150405.000000"), TTL: time.Second})
		return err
	}
	if err := acquire(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		srv.Kill()
		// A burst of calls, as from many clients at once, while Redis is down.
		for range 60 {
			start := time.Now()
			if err := acquire(); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("round %d: acquire with Redis down: %v, want ErrUnavailable", round, err)
			}
			if d := time.Since(start); d > time.Second && gate.Down() {
				t.Errorf("round %d: an answer with the gate closed took %v, want at once", round, d)
			}
		}
		if !gate.Down() {
			t.Fatalf("round %d: the gate is open with Redis down", round)
		}
		if err := srv.Restart(); err != nil { // returns once Redis answers PING
			t.Fatal(err)
		}
		back := time.Now()
		for acquire() != nil {
			if time.Since(back) > 5*time.Second {
				t.Fatalf("round %d: no success 5 s after Redis came back", round)
			}
			time.Sleep(2 * time.Millisecond) // polling like a client; the event is Redis answering
		}
		took := time.Since(back)
		t.Logf("round %d: Redis back (PING answered) -> first success: %v", round, took)
		if took > 100*time.Millisecond {
			t.Errorf("round %d: first success %v after Redis answered PING, want within 100 ms", round, took)
		}
	}
}

// A store closed while Redis is down returns from Close: the pub/sub
// connection's reconnect dials through the gate and, with the gate closed,
// waits for Redis inside go-redis's lock on the connection; Close must not
// wait behind it for ever (as a SIGTERM while Redis is down would).
func TestCloseWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb, gate, err := redisconn.NewGatedClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := store.New(rdb, store.Options{Prefix: "gc", Gate: gate, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	ctx := context.Background()
	if _, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { // a waiter: the pub/sub connection is in use
		_, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Minute, Wait: time.Minute})
		waited <- err
	}()
	for s.LocalWaiters("x") == 0 {
		time.Sleep(time.Millisecond) // the waiter announces itself only here
	}
	srv.Kill()
	for !gate.Down() {
		if _, err := s.State(ctx, "x"); err == nil {
			t.Fatal("state answered with Redis down")
		}
	}
	// The receiver redials after a pause of up to 100 ms, and then waits in the
	// gate: a state nothing outside shows, so give it the time.
	time.Sleep(300 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close has not returned 10 s after it was called with Redis down")
	}
	if err := <-waited; !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrLockHeld) {
		t.Errorf("the waiter: %v", err)
	}
}
