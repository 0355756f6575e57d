package store_test

// Review 3: attacks on the Redis Cluster support (store/cluster.go,
// store/dispatcher.go, store/clock.go) on live clusters. Every test here that
// fails names the defect it shows; the ones that pass are attacks that failed.

import (
	"context"
	"errors"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// r3OtherMaster is a running master of c other than not.
func r3OtherMaster(t *testing.T, c *redistest.Cluster, not *redistest.Server) *redistest.Server {
	t.Helper()
	for _, n := range c.Nodes {
		if n == not || !n.Running() {
			continue
		}
		info, err := n.Client(t).Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:master") {
			return n
		}
	}
	t.Fatal("no other master")
	return nil
}

// r3Migrate moves key's slot from one master to another.
func r3Migrate(t *testing.T, c *redistest.Cluster, key string, from, to *redistest.Server) {
	t.Helper()
	if err := c.MigrateSlot(context.Background(), redistest.Slot(key), from, to); err != nil {
		t.Fatalf("migrate %s -> %s: %v", from.Addr(), to.Addr(), err)
	}
}

// r3AwaitChannel waits until the store has the lock's channel on the link to
// addr, confirmed.
func r3AwaitChannel(t *testing.T, s *store.Store, name, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if a, ready := s.R3Channel(name); a == addr && ready {
			return
		}
		time.Sleep(2 * time.Millisecond) // the dispatcher's state is only visible by asking
	}
	a, ready := s.R3Channel(name)
	t.Fatalf("%s: channel on %q (ready %v), want it confirmed on %s", name, a, ready, addr)
}

// r3AfterTopologyTick returns right after the next slot-map load of a store
// made at born: the topology loads every 2 s from its start (topologyEvery),
// so this leaves almost 2 s before the next load on its own. (Aligning with a
// timer's phase: there is no event to await.)
func r3AfterTopologyTick(born time.Time) { r3AfterTick(born, 2*time.Second) }

// r3AfterTick returns 100 ms after the next tick of a ticker of period every
// started at born.
func r3AfterTick(born time.Time, every time.Duration) {
	into := time.Since(born) % every
	time.Sleep(every - into + 100*time.Millisecond)
}

// r3Waiter starts a non-fair acquire that waits up to wait, and returns when
// its result comes.
func r3Waiter(t *testing.T, s *store.Store, name string, wait time.Duration) <-chan store.AcquireResult {
	t.Helper()
	got := make(chan store.AcquireResult, 1)
	go func() {
		r, err := s.Acquire(context.Background(), store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: wait})
		if err != nil {
			t.Errorf("%s: waiter: %v", name, err)
		}
		got <- r
	}()
	awaitWaiters(t, s, name, 1)
	return got
}

// DEFECT (dispatcher, unsubs bookkeeping): a SUNSUBSCRIBE the writer sends to
// a node that no longer serves the channel's slot is answered MOVED, not with a
// confirmation, yet link.unsubs counts it as pending for ever (until the link
// is renewed). Every migration leaves such a count: the channel is moved off
// the old master after that master gave the slot up. When the slot later comes
// back to that master and leaves it again, the node's own SUNSUBSCRIBE of the
// channel is taken for the confirmation of that old one and ignored: the
// channel stays on a link where nothing is subscribed, no slot-map load is
// asked for, and the waiters sleep through a release on the new master until
// the next periodic load (up to topologyEvery, 2 s) reroutes the channel. The
// README promises the store follows "at once ... the node dropping a channel
// because its slot left".
//
// Suggested fix: match replies to the writer's commands in order (a FIFO of
// expected replies per connection: a confirmation or an error reply, MOVED
// included, ends the oldest), and treat any unmatched sunsubscribe as the
// node's; or simply never trust a sunsubscribe for a channel whose last
// SSUBSCRIBE on the link came after the SUNSUBSCRIBE being counted.
func TestR3UnsubscribeOfAMovedSlotSwallowsTheNodesDrop(t *testing.T) {
	c := sharedCluster(t)
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "r3u"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "r3u", 1)[0]
	key := "r3u:{" + name + "}"
	a, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := r3OtherMaster(t, c, a)
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := r3Waiter(t, s, name, 10*time.Second)
	r3AwaitChannel(t, s, name, a.Addr())

	// There and back: each move leaves a stale count on the master it left.
	r3Migrate(t, c, key, a, b)
	r3AwaitChannel(t, s, name, b.Addr())
	r3Migrate(t, c, key, b, a)
	r3AwaitChannel(t, s, name, a.Addr())
	if n := s.R3Unsubs(a.Addr(), name); n != 0 {
		t.Errorf("link to %s counts %d SUNSUBSCRIBEs of %s in flight; none is (each was answered MOVED)", a.Addr(), n, key+":ev")
	}

	// Away again, with the next periodic load ~2 s off: A drops the channel.
	r3AfterTopologyTick(born)
	r3Migrate(t, c, key, a, b)
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

// DEFECT (same root as above, worse outcome): when the slot leaves a master and
// comes back to it between two periodic loads (a rebalance undone, a migration
// rolled back), the store's slot map never changes, so nothing ever reroutes
// the channel: after the node's SUNSUBSCRIBE is ignored the channel stays
// "ready" on a link with no subscription for good. Releases and grants
// announced on that master are never heard; a non-fair waiter sleeps through
// a free lock until its wait ends (its lease timer's poke announces on the
// same deaf channel).
func TestR3SlotBackAndForthLeavesChannelDeaf(t *testing.T) {
	c := sharedCluster(t)
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "r3d"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "r3d", 1)[0]
	key := "r3d:{" + name + "}"
	a, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := r3OtherMaster(t, c, a)
	first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
	if err != nil || first.Lease == nil {
		t.Fatal(first, err)
	}
	got := r3Waiter(t, s, name, 6*time.Second)
	r3AwaitChannel(t, s, name, a.Addr())
	r3Migrate(t, c, key, a, b)
	r3AwaitChannel(t, s, name, b.Addr())
	r3Migrate(t, c, key, b, a)
	r3AwaitChannel(t, s, name, a.Addr())

	// Away and straight back, between two loads.
	r3AfterTopologyTick(born)
	r3Migrate(t, c, key, a, b)
	r3Migrate(t, c, key, b, a)

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
		addr, ready := s.R3Channel(name)
		t.Errorf("waiter woken %v after the release (its wait's end): the store has its channel on %s ready=%v, the node has %d subscribers",
			d.Round(time.Millisecond), addr, ready, n[key+":ev"])
	}
}

// r3StartIPv6Cluster starts a 3-master cluster (no replicas) whose nodes know
// each other, and announce themselves, at ::1 (each also listens on
// 127.0.0.1, for redistest's own checks).
func r3StartIPv6Cluster(t *testing.T) (*redistest.Cluster, string) {
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

// DEFECT (cluster.go, redirect): on a cluster whose nodes have IPv6
// addresses, Redis writes a redirection as "ASK 3999 ::1:7001" (no brackets).
// go-redis's cluster client brackets it (internal.GetAddr) before dialling;
// the store's own redirect() does not, and evalWaitCluster dials "::1:7001"
// ("too many colons in address"). So with BATON_WAIT_REPLICAS, every call on a
// slot being migrated (answered ASK by its old master for as long as the
// migration lasts) fails with 503; a MOVED one also writes the unbracketed
// address into the slot map (topology.moved), where pub/sub links and WAIT
// pipelines use it until the next load. The dispatcher's handling of a MOVED
// reply to SSUBSCRIBE (receive -> moved) parses it with the same function.
//
// Suggested fix: parse the address as go-redis does (last colon; bracket a
// host that has a colon): net.JoinHostPort(host, port) in redirect().
func TestR3IPv6RedirectInWaitPipeline(t *testing.T) {
	c, url := r3StartIPv6Cluster(t)
	rdb, err := store.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(rdb, store.Options{Prefix: "r3v6", WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	ctx := context.Background()
	name := "v6lock"
	key := "r3v6:{" + name + "}"
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
	from := r3PortMaster(t, c, key)
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

// r3PortMaster is the node serving key's slot, matched by port (MasterOf
// matches addresses, which on the IPv6 cluster are [::1]:port).
func r3PortMaster(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
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

// DEFECT (cluster.go, onceCmd): while a slot migrates, Redis answers every
// script on it that names a key the node lacks with TRYAGAIN (a multi-key
// command during resharding), and every Baton script names the lock's queue
// key, which rarely exists: so every operation on every lock of the slot
// fails for the whole migration. TRYAGAIN says the script did not run, and
// go-redis's cluster client retries it with a backoff (about a second in all)
// - but onceCmd.NoRetry turns that off along with the unsafe retries, so the
// store answers 503 at once, and a long-poll woken during the migration ends
// with 503. A slot's migration usually lasts milliseconds.
//
// Suggested fix: retry in the store, with a short backoff bounded by the
// request, the error replies that prove the script did not run (TRYAGAIN,
// CLUSTERDOWN, MASTERDOWN, LOADING), keeping NoRetry for connection errors.
func TestR3MigratingSlotAnswersTryAgain(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "r3t"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "r3t", 1)[0]
	key := "r3t:{" + name + "}"
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	to := r3OtherMaster(t, c, from)
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

// DEFECT (cluster.go, newClusterClient; sessions.go): "no other error is
// retried, whatever the command" holds only for the scripts sent through
// onceScripter. Every other command and every pipeline of the cluster client
// is retried by go-redis after a timeout or a broken connection up to
// MaxRedirects (8) more times, whatever MaxRetries says: a session's holds
// (sessionHoldsOp: look, renew, end, pipelined), the listing's states, the
// Idempotency-Key record check, the secret. Against a master that stopped
// answering (a stall, a partition) each attempt waits out the 2 s read
// timeout, so GET, PATCH and DELETE of a session with a hold on that shard
// hang about 20 s before their 503, beyond WorstCall (8 s), which the store
// promises bounds any call (shutdown budgets, "not after" deadlines).
//
// Suggested fix: set ClusterOptions.MaxRedirects for what it is (redirects)
// but make the store's plain commands and pipelines NoRetry too (wrap them,
// or run them on the per-node clients of the topology, which have no
// retries), and let the store retry what is idempotent itself.
func TestR3SessionOnAStalledShardAnswersWithinWorstCall(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{ReplicasPer: -1, NodeTimeout: 30 * time.Second})
	ctx := context.Background()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := newClusterStore(t, c, store.Options{Prefix: "r3s"})
	name := namesOnEveryShard(t, c, "r3s", 1)[0]
	stalled, err := c.MasterOf(ctx, "r3s:{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	// A session whose own keys live on another master.
	var sess store.Session
	for i := 0; ; i++ {
		sess, _, err = s.CreateSession(ctx, store.SessionRequest{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.MasterOf(ctx, store.R3SessionKey(s, sess.ID))
		if err != nil {
			t.Fatal(err)
		}
		if m != stalled {
			break
		}
		if i > 50 {
			t.Fatal("every session landed on one master")
		}
	}
	if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, Session: sess.ID}); err != nil || r.Lease == nil {
		t.Fatalf("acquire in the session: %+v %v", r, err)
	}

	stalled.Freeze()
	t.Cleanup(stalled.Thaw)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.GetSession(ctx, store.Ref{ID: sess.ID})
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("GetSession answered after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(store.WorstCall):
		t.Errorf("GetSession with a hold on a stalled master: no answer after %v (WorstCall)", store.WorstCall)
		stalled.Thaw()
		<-done
	}
}

// DEFECT (clock.go): the clock of each master is sampled at Ready and every
// clockEvery (5 s), for the masters of the slot map at that moment; nothing
// samples a master that appears between two samples. After a failover the
// promoted master has no estimate until the next tick, and every call on its
// locks meanwhile goes out with an empty "not after" (notAfter returns ""):
// the scripts then take no deadline, so a grant whose call timed out and was
// undone can still take effect when the call reaches Redis late (the very
// case the deadline exists for; README Guarantees, "No hold nobody knows").
// Same for handoffLatency. Only /readyz probes (Ready) make it up sooner.
//
// Suggested fix: sample a master's clock when it first appears in the slot
// map (topology.onChange), and have clockOf fall back to a fresh sample (or
// to the offset of any master, since offsets differ only by clock skew)
// rather than to no deadline.
func TestR3ClockOfAPromotedMaster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "r3c"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "r3c", 1)[0]
	victim, err := c.MasterOf(ctx, "r3c:{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	if s.R3NotAfter(name) == "" {
		t.Fatal("no clock estimate for a lock's master after Ready")
	}
	r3AfterTick(born, 5*time.Second) // right after a clock sample (clockEvery)
	victim.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for m := s.R3MasterOf(name); m == victim.Addr() || m == ""; m = s.R3MasterOf(name) {
		if time.Now().After(deadline) {
			t.Fatal("the store's slot map never named the promoted master")
		}
		time.Sleep(5 * time.Millisecond) // the slot map is only visible by asking
	}
	promoted := time.Now()
	for s.R3NotAfter(name) == "" {
		if time.Since(promoted) > time.Second {
			for s.R3NotAfter(name) == "" && time.Since(promoted) < 6*time.Second {
				time.Sleep(10 * time.Millisecond) // the estimate is only visible by asking
			}
			t.Fatalf("calls on the promoted master %s went out without a \"not after\" deadline for %v",
				s.R3MasterOf(name), time.Since(promoted).Round(10*time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond) // the estimate is only visible by asking
	}
}

// DEFECT (parseClusterURL, and NewClient for redis://): "It never echoes the
// URL in an error: it may carry a password" does not hold. The cluster parser
// cuts the authority at the first '/', '?' or '#', so a password with an
// unencoded '/' ends up in the path, and the error "a cluster has only
// database 0, not %q" prints the rest of the password; a plain redis:// URL
// goes to go-redis's ParseURL, whose url.Error quotes the whole URL (a
// password with an unencoded '/' or '%'). cmd/server returns that error from
// run, so the password reaches the logs. (A raw '@' or ',' in a cluster
// password is parsed right: LastIndex of '@'.)
//
// Suggested fix: cut the userinfo at the last '@' before the first '/' that
// follows it (or refuse any '@' after a '/'), and never wrap url.Error or
// go-redis's parse errors: say which part is wrong, not what it holds.
func TestR3URLErrorsNeverEchoThePassword(t *testing.T) {
	tests := []struct{ give, secret string }{
		{give: "redis+cluster://u:hunter/2secret@h1:7000", secret: "2secret"},
		{give: "rediss+cluster://u:hunter/2secret@h1:7000,h2:7001/0", secret: "2secret"},
		{give: "redis://u:hunter/2secret@h1:7000/0", secret: "hunter"},
		{give: "redis://u:pa%zzsecret@h1:7000/0", secret: "zzsecret"},
	}
	for _, tt := range tests {
		_, err := store.NewClient(tt.give)
		if err != nil && strings.Contains(err.Error(), tt.secret) {
			t.Errorf("NewClient(a URL with password part %q): error %q shows it", tt.secret, err)
		}
	}
}

// A master SIGKILLed under every kind of long-poll (non-fair acquire, fair
// acquire, ticket poll, watch): those on its shard answer (503) within
// seconds, those on other shards keep waiting and are woken by releases; the
// undo cleaner empties its backlog on the promoted master; the pub/sub links
// end up on masters only, as many as baton_pubsub_connections says; and
// after Close nothing is left running. (An attack that failed: it passes.)
func TestR3FailoverUnderEveryLongPoll(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := context.Background()
	before := runtime.NumGoroutine()
	rdb, err := store.NewClient(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := store.New(rdb, store.Options{Prefix: "r3k", Metrics: m, WaitReplicas: 1, WaitTimeout: time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(t))})
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
			_ = rdb.Close()
		}
	})
	for deadline := time.Now().Add(10 * time.Second); s.Ready(ctx) != nil; {
		if time.Now().After(deadline) {
			t.Fatal("not ready")
		}
		time.Sleep(20 * time.Millisecond) // readiness is only known by asking
	}
	names := namesOnEveryShard(t, c, "r3k", 1)
	victim, err := c.MasterOf(ctx, "r3k:{"+names[0]+"}")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		name, kind string
		err        error
	}
	answers := make(chan answer, 4*len(names))
	leases := map[string]string{}
	for _, name := range names {
		first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
		if err != nil || first.Lease == nil {
			t.Fatal(first, err)
		}
		leases[name] = first.Lease.ID
		queued, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Fair: true})
		if err != nil || queued.Ticket == nil {
			t.Fatal(queued, err)
		}
		go func() {
			_, err := s.Poll(ctx, store.Ref{Name: name, ID: queued.Ticket.ID}, 20*time.Second)
			answers <- answer{name, "poll", err}
		}()
		go func() {
			_, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second, Fair: true})
			answers <- answer{name, "fair acquire", err}
		}()
		go func() {
			_, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second, Wait: 20 * time.Second})
			answers <- answer{name, "acquire", err}
		}()
		go func() {
			_, err := s.Watch(ctx, name, nil, 20*time.Second)
			answers <- answer{name, "watch", err}
		}()
		awaitWaiters(t, s, name, 4)
	}

	victim.Kill()
	killed := time.Now()
	for range 4 {
		select {
		case a := <-answers:
			if a.name != names[0] {
				t.Errorf("%s on a live shard answered %v while another shard failed over", a.kind, a.err)
			} else if !errors.Is(a.err, store.ErrUnavailable) {
				t.Errorf("%s on the dead shard: %v, want ErrUnavailable", a.kind, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("long-polls on the dead master still waiting %v after the kill", time.Since(killed))
		}
	}
	if err := c.AwaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// The live shards' waiters are still woken by releases.
	for _, name := range names[1:] {
		if _, err := s.Release(ctx, store.Ref{Name: name, ID: leases[name]}); err != nil {
			t.Fatalf("%s: release: %v", name, err)
		}
	}
	for range 2 * 2 { // per live lock: the poll (granted) and the watch (changed)
		select {
		case a := <-answers:
			if a.err != nil || a.name == names[0] {
				t.Errorf("%s %s after a release: %v", a.name, a.kind, a.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a release on a live shard woke nobody")
		}
	}
	// Undos and links settle.
	deadline := time.Now().Add(8 * time.Second)
	for {
		links, masters := s.R3Links(), s.R3Masters()
		onMasters := true
		for _, l := range links {
			if !slices.Contains(masters, l) {
				onMasters = false
			}
		}
		if s.R3PendingUndos() == 0 && onMasters && float64(len(links)) == testutil.ToFloat64(m.PubSubConns) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("undos pending %d; links %v, masters %v, baton_pubsub_connections %v",
				s.R3PendingUndos(), links, masters, testutil.ToFloat64(m.PubSubConns))
		}
		time.Sleep(20 * time.Millisecond) // only visible by asking
	}
	closed = true
	start := time.Now()
	_ = s.Close()
	_ = rdb.Close()
	if d := time.Since(start); d > store.WorstCall {
		t.Errorf("Close took %v", d)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before+2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the store", runtime.NumGoroutine(), before)
		}
		time.Sleep(20 * time.Millisecond) // goroutines end by themselves
	}
}

// r3Roles maps each master's address to its replica's node, on c now.
func r3Roles(t *testing.T, c *redistest.Cluster) (masters []string, replicaOf map[string]*redistest.Server) {
	t.Helper()
	replicaOf = map[string]*redistest.Server{}
	for _, n := range c.Nodes {
		info, err := n.Client(t).Info(context.Background(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "role:master") {
			masters = append(masters, n.Addr())
			continue
		}
		for _, line := range strings.Split(info, "\r\n") {
			if p, ok := strings.CutPrefix(line, "master_port:"); ok {
				replicaOf["127.0.0.1:"+p] = n
			}
		}
	}
	slices.Sort(masters)
	return masters, replicaOf
}

// r3ManualFailover promotes a replica (CLUSTER FAILOVER, no data lost) and
// waits until every node's slot map names it where it named its old master.
func r3ManualFailover(t *testing.T, c *redistest.Cluster, replica *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	cl := replica.Client(t)
	if err := cl.Do(ctx, "cluster", "failover").Err(); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if time.Since(asked) > 3*time.Second { // a manual failover may time out: ask again
			info, _ := cl.Info(ctx, "replication").Result()
			if strings.Contains(info, "role:slave") {
				_ = cl.Do(ctx, "cluster", "failover").Err()
			}
			asked = time.Now()
		}
		agreed := true
		for _, n := range c.Nodes {
			slots, err := n.Client(t).ClusterSlots(ctx).Result()
			if err != nil {
				agreed = false
				break
			}
			found := false
			for _, r := range slots {
				found = found || r.Nodes[0].Addr == replica.Addr()
			}
			agreed = agreed && found
		}
		if agreed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("manual failover never agreed on")
		}
		time.Sleep(10 * time.Millisecond) // slot maps are only visible by asking
	}
	if err := c.AwaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// DEFECT (list.go on a cluster): a listing cursor names a node by its index
// among the masters sorted by address, and carries that node's SCAN cursor.
// After a failover (here a graceful CLUSTER FAILOVER: nothing is lost, every
// lock stays held) the promoted replica has another address, the sorted list
// shifts, and the next page goes on with the SCAN of another node, or skips
// the rest of a node it thinks it has done: held locks are never listed,
// though list.go promises SCAN's guarantee ("visits every key that exists from
// start to end of the iteration").
//
// Suggested fix: name the node in the cursor by the slots it serves (say its
// first slot), not by its place in a list of addresses, and resume from the
// node that serves that slot now (a replica promoted in its place has the
// same keys; SCAN from 0 again, keeping "after", when the node changed).
func TestR3ListingAcrossAFailover(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	s := newClusterStore(t, c, store.Options{Prefix: "r3l"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "r3l", 4)
	for _, name := range names {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	masters, _ := r3Roles(t, c)
	// Page until the cursor goes on with a master after the first (the pages
	// so far listed the ones before it), and fail that master over.
	listed := map[string]bool{}
	victim := ""
	page, err := s.List(ctx, store.ListRequest{Limit: 1})
	for ; err == nil && page.Next != ""; page, err = s.List(ctx, store.ListRequest{Limit: 1, Cursor: page.Next}) {
		for _, l := range page.Locks {
			listed[l.Name] = true
		}
		if n := s.R3CursorNode(ctx, page.Next); slices.Contains(masters, n) && len(listed) > 1 {
			victim = n
			break
		}
	}
	if err != nil || victim == "" {
		t.Fatalf("the listing never went on with a master after its first: %v", err)
	}
	_, replicaOf := r3Roles(t, c)
	r3ManualFailover(t, c, replicaOf[victim])
	for cursor := page.Next; cursor != ""; {
		page, err := s.List(ctx, store.ListRequest{Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatalf("list after the failover: %v", err)
		}
		for _, l := range page.Locks {
			listed[l.Name] = true
		}
		cursor = page.Next
	}
	var missing []string
	for _, name := range names {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("a listing across a failover (of %s, the cursor's node) never listed %d of %d held locks: %v",
			victim, len(missing), len(names), missing)
	}
}

// DEFECT (list.go, states, on a cluster): the listing reads the state of each
// lock of a SCAN batch in one pipeline of the cluster client. A lock whose
// slot is migrating answers TRYAGAIN (its state script names the queue key,
// which the node lacks), and go-redis's cluster pipeline retries a TRYAGAIN
// only when it is the first reply of its node's batch: otherwise the error
// stays, and the whole page, every lock of every shard, fails with 503 for as
// long as one slot migrates (a rebalance migrates slots one after another for
// minutes).
//
// Suggested fix: retry the failed states alone (TRYAGAIN: nothing ran), or
// leave out, or mark, the locks whose state could not be read, rather than
// failing the page.
//
// (The migration here ends 300 ms on, as a slot's usually does within a
// rebalance; a migration stuck for good may still fail the page.)
func TestR3ListingWhileASlotMigrates(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "r3m"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "r3m", 3)
	for _, name := range names {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	// Migrate the slot of the last name (by name) of some shard, so that its
	// state is not the first of its node's pipeline.
	slices.Sort(names)
	moving := names[len(names)-1]
	key := "r3m:{" + moving + "}"
	from, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	to := r3OtherMaster(t, c, from)
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

// DEFECT (cluster.go, topology.node): the topology makes a client for every
// address that was ever a master (WAIT pipelines, TIME samples, pub/sub
// links) and keeps it, with its pool of open connections, until the store
// closes. A master demoted by a failover keeps the store's idle connections
// for ever; on a cluster whose nodes come and go (pods with new addresses)
// the clients and their connections only grow. The dispatcher drops its link
// to a node that serves no slot (dropIdle); the client under it stays.
//
// Suggested fix: close and forget the client of an address the slot map no
// longer names as a master (once no link uses it).
func TestR3NodeClientsOfDemotedMastersAreClosed(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	s := newClusterStore(t, c, store.Options{Prefix: "r3n", WaitReplicas: 1, WaitTimeout: time.Second})
	ctx := context.Background()
	for _, name := range namesOnEveryShard(t, c, "r3n", 1) {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	masters, replicaOf := r3Roles(t, c)
	old := masters[0]
	if !slices.Contains(s.R3NodeClients(), old) {
		t.Fatalf("no client for master %s: %v", old, s.R3NodeClients())
	}
	r3ManualFailover(t, c, replicaOf[old])
	deadline := time.Now().Add(8 * time.Second) // a few slot-map loads
	for slices.Contains(s.R3Masters(), old) || slices.Contains(s.R3NodeClients(), old) {
		if time.Now().After(deadline) {
			t.Fatalf("%s demoted, yet the store keeps a client for it: masters %v, clients %v",
				old, s.R3Masters(), s.R3NodeClients())
		}
		time.Sleep(20 * time.Millisecond) // only visible by asking
	}
}

// A shard's pub/sub connection killed (CLIENT KILL TYPE pubsub on that master
// only) just before a release there: the release's message is lost, and the
// renewed link's re-check wakes the waiter; the other shards' waiters are
// untouched. (An attack that failed: it passes.)
func TestR3PubSubKilledOnOneShard(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "r3p"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "r3p", 1)
	victim, err := c.MasterOf(ctx, "r3p:{"+names[0]+"}")
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]string{}
	waiters := map[string]<-chan store.AcquireResult{}
	for _, name := range names {
		first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 30 * time.Second})
		if err != nil || first.Lease == nil {
			t.Fatal(first, err)
		}
		leases[name] = first.Lease.ID
		waiters[name] = r3Waiter(t, s, name, 10*time.Second)
		m, _ := c.MasterOf(ctx, "r3p:{"+name+"}")
		r3AwaitChannel(t, s, name, m.Addr())
	}
	if err := victim.Client(t).Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		released := time.Now()
		if _, err := s.Release(ctx, store.Ref{Name: name, ID: leases[name]}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-waiters[name]:
			if r.Lease == nil {
				t.Errorf("%s: waiter %+v", name, r)
			}
			if d := time.Since(released); d > time.Second {
				t.Errorf("%s: waiter woken %v after the release", name, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waiter not woken 5 s after the release", name)
		}
	}
}
