package redistest_test

import (
	"context"
	"testing"

	"github.com/batonhq/baton/internal/redistest"
)

// The cluster comes up healthy, serves every slot, and Slot agrees with Redis.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(c.Nodes))
	}
	ctx := context.Background()
	cl := c.Client(t)
	for _, key := range []string{"a", "baton:{x}:ev", "{}", "{a}b", "foo{}{bar}", "é∂"} {
		want, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redistest.Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", key, got, want)
		}
		if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		m, err := c.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := m.Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Errorf("%q not on its master %s: %d %v", key, m.Addr(), n, err)
		}
	}
}
