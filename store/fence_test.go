package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// TestFenceGuardClockSteps runs the scripts on the embedded store, whose clock a
// test can set, to show the reasoning next to next_fence in lua/lib.lua: a
// backward step of the Redis clock while the fence key exists, or of less than
// the guard after it is gone, keeps fences increasing; a step of more than the
// guard after the key is gone is the documented limit.
func TestFenceGuardClockSteps(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	base := time.UnixMilli(1_800_000_000_000)
	m.SetTime(base)
	rdb, err := redisconn.NewClient("redis://" + m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	const guard = 10 * time.Second
	s := store.New(rdb, store.Options{Prefix: "g", FenceGuard: guard, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	fenceKey := s.LockKey("x") // the only key of a name once nothing holds it
	keeps := guard

	// grant takes and releases the lock at Redis clock time at, and returns its fence.
	grant := func(at time.Time) int64 {
		t.Helper()
		m.SetTime(at)
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: "x", TTL: time.Second})
		if err != nil || res.Lease == nil {
			t.Fatalf("acquire at %v: %+v, %v", at.Sub(base), res, err)
		}
		if _, err := s.Release(ctx, store.Ref{Name: "x", ID: res.Lease.ID}); err != nil {
			t.Fatal(err)
		}
		return res.Lease.Fence
	}
	// pass lets d go by on the Redis clock (expiring keys) from at.
	pass := func(at time.Time, d time.Duration) time.Time {
		m.FastForward(d)
		return at.Add(d)
	}

	f1 := grant(base)
	if ttl := m.TTL(fenceKey); ttl <= 0 || ttl > keeps {
		t.Fatalf("lock key ttl %v after the last hold ended, want (0, %v]", ttl, keeps)
	}
	// A step back of 5 s while the key exists: last + 1.
	f2 := grant(base.Add(-5 * time.Second))
	if f2 <= f1 {
		t.Fatalf("step back while the key exists: fence %d, want > %d", f2, f1)
	}
	// The guard passes: nothing of the name is left. (It is counted from the
	// last fence's time, which the step back did not move back: 5 s more.)
	now := pass(base, keeps+5*time.Second+time.Millisecond)
	for _, k := range m.Keys() {
		t.Fatalf("key %s after the guard, want none", k)
	}
	// A step back of 9 s (< guard) after the key is gone: the time floor still wins.
	f3 := grant(now.Add(-9 * time.Second))
	if f3 <= f2 {
		t.Fatalf("step back of 9s < guard after expiry: fence %d, want > %d", f3, f2)
	}
	// The documented limit: a step back of more than the guard after the key is
	// gone gives a fence below the last one.
	now = pass(now.Add(-9*time.Second), keeps+time.Millisecond)
	f4 := grant(now.Add(-guard - 2*time.Second))
	if f4 >= f3 {
		t.Fatalf("step back beyond the guard: fence %d; the documented limit says it can fall below %d", f4, f3)
	}
	t.Logf("fences %d %d %d, then %d after a step beyond the guard", f1, f2, f3, f4)
}

// TestFenceKeyLifetime: on real Redis, the lock's key (which keeps the fence)
// outlives a hold, then lasts the guard after the last grant, and then nothing
// of the name is left.
func TestFenceKeyLifetime(t *testing.T) {
	ctx := context.Background()
	prefix := "fl" + time.Now().Format("150405.000000")
	s := newStore(t, store.Options{Prefix: prefix, FenceGuard: time.Second})
	rdb := shared.Client(t)
	lease, err := s.Acquire(ctx, store.AcquireRequest{Name: "n", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fenceKey := s.LockKey("n")
	if ttl := rdb.PTTL(ctx, fenceKey).Val(); ttl < 4*time.Second {
		t.Fatalf("fence key ttl %v while a 5 s hold lasts, want >= the hold's", ttl)
	}
	if _, err := s.Release(ctx, store.Ref{Name: "n", ID: lease.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	// A renewal past the guard keeps it too.
	l2, err := s.Acquire(ctx, store.AcquireRequest{Name: "n", TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Renew(ctx, store.Ref{Name: "n", ID: l2.Lease.ID}, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, fenceKey).Val(); ttl < 2900*time.Millisecond {
		t.Fatalf("fence key ttl %v after a 3 s renewal, want >= 2.9s", ttl)
	}
	if _, err := s.Release(ctx, store.Ref{Name: "n", ID: l2.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(rdb.Keys(ctx, prefix+":*").Val()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys of the name still there 10 s after the last hold with a 1 s guard")
		}
		time.Sleep(100 * time.Millisecond) // expiry on the Redis clock is the event
	}
}
