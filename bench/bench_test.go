package main

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// TestSmoke runs the harness's cheapest paths against a real redis-server, so
// that `go test ./...` keeps it compiling and working: redis-script uncontended
// at concurrency 1 for 200 ms, and a round of redis-script handoffs.
func TestSmoke(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pid, err := redisPID(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRedisClient(srv.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScriptLocker(rdb, "smoke")

	u, err := uncontended(ctx, target{sysRedisScript, s.pair, []int{pid}}, 1, 50*time.Millisecond, 200*time.Millisecond, 0, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	if u.ops <= 0 || u.p50 <= 0 || u.p99 < u.p50 || u.errors != 0 {
		t.Errorf("uncontended: got %+v, want pairs with p99 >= p50 > 0 and no errors", u)
	}

	h, err := handoff(ctx, scriptHandoff(rdb, s), 2, 4, "smoke-h")
	if err != nil {
		t.Fatal(err)
	}
	if h.grants < 4 || h.inversions != 0 || h.p50 <= 0 {
		t.Errorf("handoff: got %+v, want >= 4 grants in order", h)
	}
}

func TestInversions(t *testing.T) {
	for _, tt := range []struct {
		give []int
		want int
	}{
		{give: nil, want: 0},
		{give: []int{0, 1, 2, 3}, want: 0},
		{give: []int{1, 0, 2, 3}, want: 1},
		{give: []int{3, 2, 1, 0}, want: 3},
		{give: []int{0, 2, 1, 3}, want: 1},
	} {
		if got := inversions(tt.give); got != tt.want {
			t.Errorf("inversions(%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		give []float64
		want float64
	}{
		{give: nil, want: 0},
		{give: []float64{3}, want: 3},
		{give: []float64{5, 1, 3}, want: 3},
		{give: []float64{4, 1, 3, 2}, want: 2.5},
	} {
		if got := median(tt.give); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
