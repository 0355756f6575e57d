package store_test

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
	"github.com/rs/zerolog"
)

// migrateSlot moves key's slot from one master to another.
func migrateSlot(t *testing.T, c *redistest.Cluster, key string, from, to *redistest.Server) {
	t.Helper()
	if err := c.MigrateSlot(context.Background(), redistest.Slot(key), from, to); err != nil {
		t.Fatalf("migrate %s -> %s: %v", from.Addr(), to.Addr(), err)
	}
}

// awaitChannelOn waits until the store has the lock's channel on the link to
// addr, confirmed.
func awaitChannelOn(t *testing.T, s *store.Store, name, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if a, ready := s.ChannelLink(name); a == addr && ready {
			return
		}
		time.Sleep(2 * time.Millisecond) // the dispatcher's state is only visible by asking
	}
	a, ready := s.ChannelLink(name)
	t.Fatalf("%s: channel on %q (ready %v), want it confirmed on %s", name, a, ready, addr)
}

// A channel follows its slot each time the slot leaves a master, also a master
// the slot has left before. Every migration ends with the store unsubscribing
// the channel from a node that has already given the slot up, which answers
// that SUNSUBSCRIBE with MOVED: the dispatcher matches the replies on a link to
// the commands it wrote there, in order, so that reply settles the
// SUNSUBSCRIBE and none stays counted as pending. When the slot leaves the
// master again, the node's own SUNSUBSCRIBE of the channel is then taken for
// what it is, its slot gone: the store subscribes the channel again where its
// slot map says and has the map loaded afresh (a MOVED reply to that
// SSUBSCRIBE moves it on), so a waiter hears a release on the new master
// within a second, not at the next periodic load (up to topologyEvery, 2 s,
// away). docs/operations.md promises the slot map is followed at once when a
// node drops a channel because its slot left.
func TestChannelFollowsItsSlotWhenTheSlotLeavesAMasterAgain(t *testing.T) {
	c := sharedCluster(t)
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "cxu"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "cxu", 1)[0]
	key := "cxu:{" + name + "}"
	a, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := otherMaster(t, c, a)
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := startWaiter(t, s, name, 10*time.Second)
	awaitChannelOn(t, s, name, a.Addr())

	// There and back: each move leaves a stale count on the master it left.
	migrateSlot(t, c, key, a, b)
	awaitChannelOn(t, s, name, b.Addr())
	migrateSlot(t, c, key, b, a)
	awaitChannelOn(t, s, name, a.Addr())
	if n := s.UnconfirmedUnsubscribes(a.Addr(), name); n != 0 {
		t.Errorf("link to %s counts %d SUNSUBSCRIBEs of %s in flight; none is (each was answered MOVED)", a.Addr(), n, key+":ev")
	}

	// Away again, with the next periodic load ~2 s off: A drops the channel.
	afterTopologyTick(born)
	migrateSlot(t, c, key, a, b)
	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Lease == nil {
		t.Fatalf("waiter: %+v", r)
	}
	if d := time.Since(released); d > time.Second {
		t.Errorf("waiter woken %v after the release on the new master: the node's SUNSUBSCRIBE was ignored and the channel waited for the periodic slot-map load", d.Round(time.Millisecond))
	}
}

// A slot that leaves a master and comes back to it between two periodic
// slot-map loads (a rebalance undone, a migration rolled back) leaves the
// store's slot map as it was, so only the nodes' own SUNSUBSCRIBEs tell the
// store its subscription is gone. Each is taken for the node's, never for the
// confirmation of a SUNSUBSCRIBE the store sent during an earlier migration
// (those were settled by their MOVED replies), and the channel is subscribed
// again on the node that serves the slot: a non-fair waiter hears a release on
// that master at once. A channel left "ready" on a link with no subscription
// would lose every release and grant announced there for good, and the waiter
// would sleep through a free lock until its wait ends (its lease timer's poke
// announces on the same channel).
func TestWaiterHearsAReleaseAfterItsSlotLeavesAndComesBack(t *testing.T) {
	c := sharedCluster(t)
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "cxd"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "cxd", 1)[0]
	key := "cxd:{" + name + "}"
	a, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := otherMaster(t, c, a)
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := startWaiter(t, s, name, 6*time.Second)
	awaitChannelOn(t, s, name, a.Addr())
	migrateSlot(t, c, key, a, b)
	awaitChannelOn(t, s, name, b.Addr())
	migrateSlot(t, c, key, b, a)
	awaitChannelOn(t, s, name, a.Addr())

	// Away and straight back, between two loads.
	afterTopologyTick(born)
	migrateSlot(t, c, key, a, b)
	migrateSlot(t, c, key, b, a)

	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Lease == nil {
		t.Fatalf("waiter: %+v", r)
	}
	if d := time.Since(released); d > time.Second {
		n, _ := a.Client(t).PubSubShardNumSub(ctx, key+":ev").Result()
		addr, ready := s.ChannelLink(name)
		t.Errorf("waiter woken %v after the release (its wait's end): the store has its channel on %s ready=%v, the node has %d subscribers",
			d.Round(time.Millisecond), addr, ready, n[key+":ev"])
	}
}

// startIPv6Cluster starts a 3-master cluster (no replicas) whose nodes know
// each other, and announce themselves, at ::1 (each also listens on
// 127.0.0.1, for redistest's own checks).
func startIPv6Cluster(t *testing.T) (*redistest.Cluster, string) {
	t.Helper()
	cli, err := redistest.CLIBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := &redistest.Cluster{}
	t.Cleanup(c.Stop)
	var seeds, v6 []string
	for range 3 {
		s, err := redistest.StartServer(t.TempDir(), "--bind", "127.0.0.1", "::1", "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000")
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, s)
		v6 = append(v6, "::1:"+strconv.Itoa(s.Port))
		seeds = append(seeds, "[::1]:"+strconv.Itoa(s.Port))
	}
	args := append([]string{"--cluster", "create"}, v6...)
	if out, err := exec.Command(cli, append(args, "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("cluster create: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.AwaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	return c, "redis+cluster://" + strings.Join(seeds, ",")
}

// On a cluster whose nodes have IPv6 addresses, Redis writes a redirection
// without brackets ("ASK 3999 ::1:7001"). The store reads one (redirect) as
// go-redis's cluster client does: the port after the last colon, the host
// bracketed. So with WaitReplicas, whose pipelines follow redirections
// themselves (evalWaitCluster), a release on a slot being migrated, which its
// old master answers with ASK for as long as the migration lasts, goes on to
// the importing node and succeeds rather than failing with 503. The same
// reading puts the address of a MOVED reply into the store's slot map (used by
// pub/sub links and WAIT pipelines), and serves a MOVED reply to an
// SSUBSCRIBE.
func TestWaitReplicasFollowsARedirectToAnIPv6Node(t *testing.T) {
	c, url := startIPv6Cluster(t)
	rdb, err := redisconn.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(rdb, store.Options{Prefix: "cxv6", WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	ctx := context.Background()
	name := "v6lock"
	key := "cxv6:{" + name + "}"
	var first store.AcquireResult
	for deadline := time.Now().Add(10 * time.Second); ; {
		first, err = s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the client learns the slot map by trying
	}
	if err != nil || first.Lease == nil {
		t.Fatalf("acquire before the migration: %+v %v", first, err)
	}
	// A queued ticket: the lock's three keys (hash, fence, queue) all exist, so
	// the importing node can run release.lua once asked (it answers TRYAGAIN
	// to a script with a key it lacks).
	queued, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Fair: true})
	if err != nil || queued.Ticket == nil {
		t.Fatalf("enqueue: %+v %v", queued, err)
	}

	// Start moving the slot: IMPORTING, MIGRATING, and its keys moved; the old
	// master answers ASK for it until the migration ends.
	from := masterByPort(t, c, key)
	var to *redistest.Server
	for _, n := range c.Nodes {
		if n != from {
			to = n
			break
		}
	}
	src, dst := from.Client(t), to.Client(t)
	slot := redistest.Slot(key)
	srcID, _ := src.ClusterMyID(ctx).Result()
	dstID, _ := dst.ClusterMyID(ctx).Result()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys in slot: %v %v", keys, err)
	}
	margs := []any{"migrate", "127.0.0.1", to.Port, "", 0, 5000, "keys"}
	for _, k := range keys {
		margs = append(margs, k)
	}
	if err := src.Do(ctx, margs...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Get(ctx, key).Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("the old master answers %v, want ASK", err)
	}

	rel, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID})
	if err != nil {
		t.Fatalf("release while the slot migrates, with WaitReplicas: %v", err)
	}
	if !rel.Released {
		t.Errorf("release: %+v", rel)
	}
}

// masterByPort is the node serving key's slot, matched by port (MasterOf
// matches addresses, which on the IPv6 cluster are [::1]:port).
func masterByPort(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	slots, err := c.Nodes[0].Client(t).ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := redistest.Slot(key)
	for _, r := range slots {
		if slot >= r.Start && slot <= r.End {
			for _, n := range c.Nodes {
				if strings.HasSuffix(r.Nodes[0].Addr, ":"+strconv.Itoa(n.Port)) {
					return n
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return nil
}

// While a slot migrates, Redis answers TRYAGAIN to a script on it that names a
// key the node lacks, and every Baton script names the lock's queue key, which
// rarely exists. TRYAGAIN says the script did not run, and a slot's migration
// usually lasts milliseconds, so the store sends such a call again after a
// short pause (10 ms doubling to 200 ms), bounded by the call's context and by
// tryAgainBudget (2 s); after a connection error it still sends nothing again
// (onceCmd). Here the slot stays importing and migrating for 300 ms before it
// moves: an acquire of a free lock made meanwhile gets its lease, not a 503.
func TestAcquireOnAMigratingSlotRetriesTryAgain(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "cxt"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "cxt", 1)[0]
	key := "cxt:{" + name + "}"
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	src, dst := from.Client(t), to.Client(t)
	slot := redistest.Slot(key)
	srcID, _ := src.ClusterMyID(ctx).Result()
	dstID, _ := dst.ClusterMyID(ctx).Result()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		// The migration ends 300 ms on: the slot's keys (other tests' locks
		// share the hash tag {n0}) go over, then the slot.
		time.Sleep(300 * time.Millisecond)
		finished <- c.MigrateSlot(ctx, slot, from, to)
	}()
	t.Cleanup(func() {
		if err := <-finished; err != nil {
			t.Errorf("finish the migration: %v", err)
		}
	})
	res, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 10 * time.Second})
	if err != nil || res.Lease == nil {
		t.Errorf("acquire of a free lock on a slot migrating for 300 ms: %+v %v", res, err)
	}
}

// A listing made while a slot migrates lists every lock, of every shard,
// rather than failing whole with 503 (a rebalance migrates slots one after
// another for minutes). The listing reads the state of each lock of a SCAN
// batch in one pipeline of the cluster client; the state of a lock whose slot
// is migrating is answered TRYAGAIN (its script names the queue key, which the
// node lacks), and go-redis's cluster pipeline sends a TRYAGAIN again only when
// it is the first reply of its node's batch. So the store reads each such
// state again alone, which waits the migration out as any call does.
//
// (The migration here ends 300 ms on, as a slot's usually does within a
// rebalance; a migration stuck for longer than tryAgainBudget still fails the
// page.)
func TestListingWhileASlotMigratesAnswersEveryLock(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "cxm"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "cxm", 3)
	for _, name := range names {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	// Migrate the slot of the last name (by name) of some shard, so that its
	// state is not the first of its node's pipeline.
	slices.Sort(names)
	moving := names[len(names)-1]
	key := "cxm:{" + moving + "}"
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	to := otherMaster(t, c, from)
	src, dst := from.Client(t), to.Client(t)
	slot := redistest.Slot(key)
	srcID, _ := src.ClusterMyID(ctx).Result()
	dstID, _ := dst.ClusterMyID(ctx).Result()
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	finished := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // a migration that lasts 300 ms
		finished <- c.MigrateSlot(ctx, slot, from, to)
	}()
	t.Cleanup(func() {
		if err := <-finished; err != nil {
			t.Errorf("finish the migration: %v", err)
		}
	})
	page, err := s.List(ctx, store.ListRequest{})
	if err != nil {
		t.Fatalf("list while one slot (of %s) migrates: %v", moving, err)
	}
	listed := map[string]bool{} // a key that moved may be scanned on both nodes
	for _, l := range page.Locks {
		listed[l.Name] = true
	}
	if len(listed) != len(names) {
		t.Errorf("listed %d locks, want %d", len(listed), len(names))
	}
}
