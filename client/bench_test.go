package client_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/client"
)

// BenchmarkAcquireRelease measures one uncontended acquire and release against
// the real stack; its allocs/op are the client's and the server's together.
func BenchmarkAcquireRelease(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.C.Acquire(ctx, "bench", client.AcquireOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.C.Release(ctx, "bench", res.Lease.ID); err != nil {
			b.Fatal(err)
		}
	}
}
