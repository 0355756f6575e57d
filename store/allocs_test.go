package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// BenchmarkAcquireRelease is the store's side of an uncontended exclusive
// acquire and release on a real Redis: its time and allocations per pair (go
// test -bench AcquireRelease -benchmem ./store).
func BenchmarkAcquireRelease(b *testing.B) {
	s := newStoreB(b)
	ctx := context.Background()
	r := store.AcquireRequest{Name: "bench", TTL: 30 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Acquire(ctx, r)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Release(ctx, store.Ref{Name: "bench", ID: res.Lease.ID}); err != nil {
			b.Fatal(err)
		}
	}
}

func newStoreB(b *testing.B) *store.Store {
	b.Helper()
	rdb, err := redisconn.NewClient(shared.URL())
	if err != nil {
		b.Fatal(err)
	}
	s := store.New(rdb, store.Options{Prefix: "bench"})
	b.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	if err := s.Ready(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}
