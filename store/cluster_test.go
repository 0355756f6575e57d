package store_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// newClusterStore returns a store on cluster c with a prefix of its own.
func newClusterStore(t *testing.T, c *redistest.Cluster, opt store.Options) *store.Store {
	t.Helper()
	rdb, err := redisconn.NewClient(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("redisconn.NewClient(%s) made a %T, want a cluster client", c.URL(), rdb)
	}
	if opt.Prefix == "" {
		opt.Prefix = "c" + strconv.FormatInt(prefixes.Add(1), 10)
	}
	opt.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s := store.New(rdb, opt)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := s.Ready(ctx)
		if err == nil {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // readiness is only known by asking
	}
}

// namesOnEveryShard returns n lock names per master of c, so that a test
// covers every shard.
func namesOnEveryShard(t *testing.T, c *redistest.Cluster, prefix string, n int) []string {
	t.Helper()
	per := map[string]int{}
	var names []string
	for i := 0; len(names) < 3*n && i < 10000; i++ {
		name := "n" + strconv.Itoa(i)
		m, err := c.MasterOf(context.Background(), prefix+":{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		if per[m.Addr()] < n {
			per[m.Addr()]++
			names = append(names, name)
		}
	}
	if len(per) != 3 {
		t.Fatalf("names spread over %d masters, want 3", len(per))
	}
	return names
}

// Every lock operation works on a cluster, on every shard: grants, waits woken
// by releases (sharded pub/sub), fair handoff, re-entry, state; and the
// process keeps one pub/sub connection per master, not per lock.
func TestClusterLocks(t *testing.T) {
	c := sharedCluster(t)
	m := metrics.New()
	s := newClusterStore(t, c, store.Options{Metrics: m, Prefix: "cl"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "cl", 4)

	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
			if err != nil || first.Lease == nil {
				t.Errorf("%s: acquire: %+v %v", name, first, err)
				return
			}
			// A non-fair waiter and a fair one, woken by releases.
			got := make(chan store.AcquireResult, 2)
			go func() {
				r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second})
				if err != nil {
					t.Errorf("%s: waiter: %v", name, err)
				}
				got <- r
			}()
			awaitWaiters(t, s, name, 1)
			released := time.Now()
			if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
				t.Errorf("%s: release: %v", name, err)
				return
			}
			r := <-got
			if r.Lease == nil || r.Lease.Fence <= first.Lease.Fence {
				t.Errorf("%s: waiter got %+v, want a lease fenced above %d", name, r, first.Lease.Fence)
				return
			}
			if d := time.Since(released); d > 2*time.Second {
				t.Errorf("%s: the release reached its waiter after %v: not by pub/sub", name, d)
			}
			go func() {
				r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second, Fair: true})
				if err != nil {
					t.Errorf("%s: fair waiter: %v", name, err)
				}
				got <- r
			}()
			awaitWaiters(t, s, name, 1)
			if _, err := s.Release(ctx, store.Ref{Name: name, ID: r.Lease.ID}); err != nil {
				t.Errorf("%s: release: %v", name, err)
				return
			}
			f := <-got
			if f.Lease == nil || f.Lease.Fence <= r.Lease.Fence {
				t.Errorf("%s: fair waiter got %+v", name, f)
				return
			}
			st, err := s.State(ctx, name)
			if err != nil || st.Fence != f.Lease.Fence || !st.Held {
				t.Errorf("%s: state %+v %v, want held at fence %d", name, st, err, f.Lease.Fence)
			}
			if _, err := s.Release(ctx, store.Ref{Name: name, ID: f.Lease.ID}); err != nil {
				t.Errorf("%s: release: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if n := testutil.ToFloat64(m.PubSubConns); n != 3 {
		t.Errorf("pub/sub connections = %v, want 3 (one per master)", n)
	}
}

// awaitWaiters waits until the store holds n long-polls on the lock.
func awaitWaiters(t *testing.T, s *store.Store, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.LocalWaiters(name) >= n {
			return
		}
		time.Sleep(2 * time.Millisecond) // the registry is only visible by asking
	}
	t.Fatalf("%s: %d local waiters never came", name, n)
}

// wait calls on one node (INFO commandstats).
func waitCallsOn(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_wait:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// With WaitReplicas, each grant's WAIT runs on the master that ran its script
// (the only place it means anything), and the replicas acknowledge it.
func TestClusterWaitOnTheScriptsNode(t *testing.T) {
	c := sharedCluster(t)
	m := metrics.New()
	s := newClusterStore(t, c, store.Options{Metrics: m, Prefix: "cw", WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	ctx := context.Background()
	for _, name := range namesOnEveryShard(t, c, "cw", 2) {
		master, err := c.MasterOf(ctx, "cw:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		before := map[*redistest.Server]int{}
		for _, n := range c.Nodes {
			before[n] = waitCallsOn(t, n)
		}
		res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 10 * time.Second})
		if err != nil || res.Lease == nil {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
		for _, n := range c.Nodes {
			got := waitCallsOn(t, n) - before[n]
			want := 0
			if n == master {
				want = 1
			}
			if got != want {
				t.Errorf("%s: WAIT on %s: %d calls, want %d (master %s)", name, n.Addr(), got, want, master.Addr())
			}
		}
	}
	if n := testutil.ToFloat64(m.WaitUnacked); n != 0 {
		t.Errorf("unacknowledged grants with live replicas: %v", n)
	}
}

// A waiter keeps waiting through its shard's pub/sub connection being killed,
// and is woken by the next release.
func TestClusterPubSubKilled(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "ck"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "ck", 1)[0]
	master, err := c.MasterOf(ctx, "ck:{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := make(chan store.AcquireResult, 1)
	go func() {
		r, _ := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second})
		got <- r
	}()
	awaitWaiters(t, s, name, 1)
	if err := master.Client(t).Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, master, "ck:{"+name+"}:ev")
	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Lease == nil {
		t.Fatalf("waiter: %+v", r)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("woken %v after the release", d)
	}
}

// awaitSubscribed waits until srv has a subscriber on the sharded channel.
func awaitSubscribed(t *testing.T, srv *redistest.Server, channel string) {
	t.Helper()
	cl := srv.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := cl.PubSubShardNumSub(context.Background(), channel).Result()
		if err == nil && n[channel] > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // subscriptions are only visible by asking
	}
	t.Fatalf("nobody subscribed to %s on %s", channel, srv.Addr())
}

// A slot moved to another master under a waiter: the node unsubscribes the
// waiter's channel, the store subscribes it on the new master, and the waiter
// is woken by a release there.
func TestClusterSlotMigrated(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "cm"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "cm", 1)[0]
	key := "cm:{" + name + "}"
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var to *redistest.Server
	for _, n := range c.Nodes[:3] {
		if n != from {
			to = n
			break
		}
	}
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := make(chan store.AcquireResult, 1)
	go func() {
		r, _ := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 30 * time.Second})
		got <- r
	}()
	awaitWaiters(t, s, name, 1)
	awaitSubscribed(t, from, key+":ev")

	if err := c.MigrateSlot(ctx, redistest.Slot(key), from, to); err != nil {
		t.Fatal(err)
	}
	awaitSubscribed(t, to, key+":ev")
	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Lease == nil || r.Lease.Fence <= first.Lease.Fence {
		t.Fatalf("waiter: %+v", r)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("woken %v after the release", d)
	}
}

// A master SIGKILLed under a waiter: the waiter answers "unavailable" (the
// client retries, as on one Redis), its replica is promoted, the store finds
// the new master, and a new waiter there is woken by a release; locks on other
// shards never stop working.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	s := newClusterStore(t, c, store.Options{Prefix: "cf", WaitReplicas: 1, WaitTimeout: time.Second})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "cf", 1)
	key := "cf:{" + names[0] + "}"
	victim, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: names[0], TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	waiter := func() chan error {
		got := make(chan error, 1)
		go func() {
			r, err := s.Acquire(ctx, store.AcquireRequest{Name: names[0], TTL: 30 * time.Second, Wait: 40 * time.Second})
			if err == nil && (r.Lease == nil || r.Lease.Fence <= first.Lease.Fence) {
				err = fmt.Errorf("waiter got %+v", r)
			}
			got <- err
		}()
		awaitWaiters(t, s, names[0], 1)
		return got
	}
	got := waiter()
	victim.Kill()
	select {
	case err := <-got:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("waiter on a dead master: %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter on a dead master never answered")
	}
	if err := c.AwaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	promoted, err := c.MasterOf(ctx, key)
	if err != nil || promoted == victim {
		t.Fatalf("no failover: %v %v", promoted, err)
	}
	// Every shard works (again).
	for _, name := range names {
		var res store.AcquireResult
		for deadline := time.Now().Add(10 * time.Second); ; {
			res, err = s.Acquire(ctx, store.AcquireRequest{Name: name + "x", TTL: 10 * time.Second})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the client learns the new map by trying
		}
		if err != nil || res.Lease == nil {
			t.Fatalf("%s after failover: %+v %v", name, res, err)
		}
	}
	got = waiter()
	awaitSubscribed(t, promoted, key+":ev")
	// The grant was acknowledged by the replica before the kill: it survived.
	if _, err := s.Release(ctx, store.Ref{Name: names[0], ID: first.Lease.ID}); err != nil {
		t.Fatalf("release after failover: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by a release on the promoted master")
	}
}

// The pub/sub links of a store on a cluster settle, once its waiters are gone,
// on at most one per master (one is made when a channel first needs it): a link to a master that failed over (demoted by
// CLUSTER FAILOVER, or killed and back at once as a replica, as the chaos
// runs do) is dropped, and baton_pubsub_connections says how many there are.
// The chaos runs' goroutine check counts on this: what a Baton on a cluster
// keeps after its workload is at most a link, two goroutines, per live master.
func TestClusterLinksSettleOnePerMaster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{NodeTimeout: time.Second})
	ctx := context.Background()
	rdb, err := redisconn.NewClient(c.URL())
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
			awaitChannelOn(t, s, name, master.Addr())
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
		_, replicaOf := replicaOfEachMaster(t, c)
		manualFailover(t, c, replicaOf[victim.Addr()])
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
		links, masters := s.PubSubLinks(), s.Masters()
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
