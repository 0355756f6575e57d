package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// The pub/sub links of a store on a cluster settle, once its waiters are gone,
// on at most one per master (one is made when a channel first needs it): a link to a master that failed over (demoted by
// CLUSTER FAILOVER, or killed and back at once as a replica, as the chaos
// runs do) is dropped, and baton_pubsub_connections says how many there are.
// The chaos runs' goroutine check counts on this: what a Baton on a cluster
// keeps after its workload is at most a link, two goroutines, per live master.
func TestClusterLinksSettleOnePerMaster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{NodeTimeout: time.Second})
	ctx := context.Background()
	rdb, err := store.NewClient(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := store.New(rdb, store.Options{Prefix: "lk", Metrics: m, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	for deadline := time.Now().Add(10 * time.Second); s.Ready(ctx) != nil; {
		if time.Now().After(deadline) {
			t.Fatal("not ready")
		}
		time.Sleep(20 * time.Millisecond) // readiness is only known by asking
	}
	names := namesOnEveryShard(t, c, "lk", 1)

	// waitOut has a waiter on every shard's lock while f fails one over, then
	// lets each have its lock and release it.
	waitOut := func(f func(victim *redistest.Server)) {
		t.Helper()
		leases := map[string]string{}
		waiters := map[string]<-chan store.AcquireResult{}
		for _, name := range names {
			r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
			if err != nil || r.Lease == nil {
				t.Fatal(r, err)
			}
			leases[name] = r.Lease.ID
			got := make(chan store.AcquireResult, 1)
			go func() {
				// The killed shard's waiter may be answered unavailable.
				r, _ := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second})
				got <- r
			}()
			awaitWaiters(t, s, name, 1)
			waiters[name] = got
			master, err := c.MasterOf(ctx, "lk:{"+name+"}")
			if err != nil {
				t.Fatal(err)
			}
			r3AwaitChannel(t, s, name, master.Addr())
		}
		victim, err := c.MasterOf(ctx, "lk:{"+names[0]+"}")
		if err != nil {
			t.Fatal(err)
		}
		f(victim)
		if err := c.AwaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			// The victim's lock may have been lost with its shard, or its
			// waiter answered unavailable: either way it is no waiter now.
			_, _ = s.Release(ctx, store.Ref{Name: name, ID: leases[name]})
			select {
			case r := <-waiters[name]:
				if r.Lease != nil {
					_, _ = s.Release(ctx, store.Ref{Name: name, ID: r.Lease.ID})
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: waiter still waiting 10 s after the release", name)
			}
		}
		awaitOnePerMaster(t, s, m, victim.Addr())
	}

	// A manual failover: the old master stays up, a replica now.
	waitOut(func(victim *redistest.Server) {
		_, replicaOf := r3Roles(t, c)
		r3ManualFailover(t, c, replicaOf[victim.Addr()])
	})
	// A kill: the replica is promoted, and the old master comes back as its
	// replica.
	waitOut(func(victim *redistest.Server) {
		victim.Kill()
		for deadline := time.Now().Add(20 * time.Second); ; {
			if m, err := c.MasterOf(ctx, "lk:{"+names[0]+"}"); err == nil && m != victim {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no replica promoted within 20 s")
			}
			time.Sleep(20 * time.Millisecond) // the cluster's view is only visible by asking
		}
		if err := victim.Restart(); err != nil {
			t.Fatal(err)
		}
	})
}

// awaitOnePerMaster waits (a few slot-map loads and nodeGrace) until each of
// the store's links is to a master, and the gauge agrees; demoted, no master
// any more, has none.
func awaitOnePerMaster(t *testing.T, s *store.Store, m *metrics.Metrics, demoted string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		links, masters := s.R3Links(), s.R3Masters()
		onMasters := len(masters) == 3
		for _, l := range links {
			onMasters = onMasters && slices.Contains(masters, l)
		}
		if onMasters && !slices.Contains(links, demoted) && float64(len(links)) == testutil.ToFloat64(m.PubSubConns) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("links %v, masters %v (demoted %s), baton_pubsub_connections %v",
				links, masters, demoted, testutil.ToFloat64(m.PubSubConns))
		}
		time.Sleep(20 * time.Millisecond) // only visible by asking
	}
}
