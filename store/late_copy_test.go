package store

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
)

// A retried acquire: the retry granted and was answered, the client released,
// and then the first copy, held up in the network, reaches Redis: it must
// grant nothing (it granted the lock again, for its whole ttl, to nobody).
func TestLateCopyOfAReleasedAcquireGrantsNothing(t *testing.T) {
	srv := redistest.Start(t)
	c, err := NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	s := New(c, Options{Prefix: "lc", Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	ctx := context.Background()
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	r := AcquireRequest{Name: "x", TTL: time.Minute}
	ids, err := s.requestIDs(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	args := s.acquireArgs(r, ids, ids.lh, "new", 0) // both copies carry the same
	copyRuns := func() reply {
		t.Helper()
		rep, err := s.runCall(ctx, s.acquire, "acquire", ids.keys(s, "x"), true, false, args...)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := copyRuns(); rep.code != "granted" {
		t.Fatalf("the retry: %q, want granted", rep.code)
	}
	if _, err := s.Release(ctx, Ref{Name: "x", ID: ids.lease}); err != nil {
		t.Fatal(err)
	}
	if rep := copyRuns(); rep.code == "granted" {
		t.Fatalf("the late first copy granted the released lease again (%v left)", srv.Client(t).PTTL(ctx, s.lockKey("x")).Val())
	}
}

// A retried acquire whose hold simply ran out: the first copy, held up in the
// network, reaches Redis after the hold's end and before the call's deadline;
// it must grant nothing (with only a release leaving a tombstone, it granted
// the lock again, for its whole ttl, to nobody). While the hold lives, a copy
// answers that hold, as a retry must.
func TestLateCopyOfAnExpiredAcquireGrantsNothing(t *testing.T) {
	srv := redistest.Start(t)
	c, err := NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	s := New(c, Options{Prefix: "lx", Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = c.Close() })
	ctx := context.Background()
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 200 * time.Millisecond
	for _, shared := range []bool{false, true} {
		r := AcquireRequest{Name: "x", TTL: ttl, Shared: shared}
		ids, err := s.requestIDs(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		args := s.acquireArgs(r, ids, ids.lh, "new", 0) // every copy carries the same
		copyRuns := func() reply {
			t.Helper()
			rep, err := s.runCall(ctx, s.acquire, "acquire", ids.keys(s, "x"), true, false, args...)
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		first := copyRuns()
		if first.code != "granted" {
			t.Fatalf("shared %v: the first copy: %q, want granted", shared, first.code)
		}
		if rep := copyRuns(); rep.code != "granted" || rep.v[1] != first.v[1] {
			t.Fatalf("shared %v: a copy while the hold lives: %v, want its grant %v", shared, rep.v, first.v)
		}
		rdb := srv.Client(t)
		for st, err := s.State(ctx, "x"); err != nil || st.Held; st, err = s.State(ctx, "x") {
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond) // expiry runs no script: only asking shows it
		}
		if rep := copyRuns(); rep.code == "granted" {
			t.Fatalf("shared %v: a copy after the hold ran out granted it again (%v left)", shared, rdb.PTTL(ctx, s.lockKey("x")).Val())
		}
	}
}
