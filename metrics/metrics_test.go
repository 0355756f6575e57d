package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/metrics"
)

// baton_redis_up follows the probe RedisDown gives it: 1 without one.
func TestRedisUp(t *testing.T) {
	m := metrics.New()
	want := func(v string) {
		t.Helper()
		exp := "# HELP baton_redis_up " + helpOf(t, m, "baton_redis_up") + "\n# TYPE baton_redis_up gauge\nbaton_redis_up " + v + "\n"
		if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(exp), "baton_redis_up"); err != nil {
			t.Error(err)
		}
	}
	want("1")
	down := true
	m.RedisDown(func() bool { return down })
	want("0")
	down = false
	want("1")
}

func helpOf(t *testing.T, m *metrics.Metrics, name string) string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetHelp()
		}
	}
	t.Fatalf("%s is not registered", name)
	return ""
}
