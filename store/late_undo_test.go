package store

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
)

// An undo queued after the cleaner made its last pass (a request whose call
// ended just as Close took over, and whose undo came a moment later) is run at
// once by whoever queues it: nothing may be left to a cleaner that has stopped,
// or the hold it undoes lasts its whole ttl, known to nobody.
func TestUndoAfterTheCleanerStopped(t *testing.T) {
	srv := redistest.Start(t)
	rdb, err := NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb, Options{Prefix: "lu", Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	ids, err := s.requestIDs(ctx, AcquireRequest{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var res AcquireResult
	s.acquire1(ctx, AcquireRequest{Name: "x", TTL: time.Minute}, ids, func(r AcquireResult, e error) { res, err = r, e })
	if err != nil || res.Lease == nil { // no wait: answered before acquire1 returns
		t.Fatalf("acquire: %+v %v", res, err)
	}
	s.stopCleaner(time.Second)
	s.undo(ids.undo("x"))
	if n := rdb.Exists(ctx, s.lockKey("x")).Val(); n != 0 {
		t.Fatalf("the hold an undo queued after the cleaner stopped was to end is still there (ttl %v)", rdb.PTTL(ctx, s.lockKey("x")).Val())
	}
}
