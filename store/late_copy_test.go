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
