package store_test

// Failovers on a live Redis Cluster: what the store's slot map, pub/sub links,
// clock estimates, listing cursors and node clients do when a master dies or
// hands over to its replica.

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// otherMaster is a running master of c other than not.
func otherMaster(t *testing.T, c *redistest.Cluster, not *redistest.Server) *redistest.Server {
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

// afterTopologyTick returns right after the next slot-map load of a store
// made at born: the topology loads every 2 s from its start (topologyEvery),
// so this leaves almost 2 s before the next load on its own. (Aligning with a
// timer's phase: there is no event to await.)
func afterTopologyTick(born time.Time) { afterTickOf(born, 2*time.Second) }

// afterTickOf returns 100 ms after the next tick of a ticker of period every
// started at born.
func afterTickOf(born time.Time, every time.Duration) {
	into := time.Since(born) % every
	time.Sleep(every - into + 100*time.Millisecond)
}

// startWaiter starts a non-fair acquire that waits up to wait, and returns when
// its result comes.
func startWaiter(t *testing.T, s *store.Store, name string, wait time.Duration) <-chan store.AcquireResult {
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

// A session with a hold on a master that stops answering (SIGSTOP: its
// connections stay open and nothing is read, as in a stall or a partition) is
// read within WorstCall, which the store promises bounds any call (shutdown
// budgets and "not after" deadlines count on it). The session's own keys are
// on another master, so only its holds wait on the stalled one; the node
// timeout is long, so no failover ends the stall. The holds' scripts go out in
// one pipeline, each sent once (onceCmd: go-redis's cluster client would send a
// timed-out command or pipeline again up to MaxRedirects more times, each
// waiting out the 2 s read timeout), and that pipeline gets one attempt's
// budget, WorstCall/2, in all.
func TestSessionWithAHoldOnAStalledShardAnswersWithinWorstCall(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{ReplicasPer: -1, NodeTimeout: 30 * time.Second})
	ctx := context.Background()
	for _, n := range c.Nodes {
		if err := n.Client(t).ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := newClusterStore(t, c, store.Options{Prefix: "cxs"})
	name := namesOnEveryShard(t, c, "cxs", 1)[0]
	stalled, err := c.MasterOf(ctx, "cxs:{"+name+"}")
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
		m, err := c.MasterOf(ctx, store.SessionKey(s, sess.ID))
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

// Calls on the locks of a replica promoted by a failover carry a "not after"
// deadline as soon as the store's slot map names the new master. Each master's
// clock is sampled every clockEvery (5 s), and also as soon as the slot map
// names a master the store has no estimate of (runClock); a call that finds no
// estimate samples one first (stamp). A call without a deadline could still
// take effect when it reaches Redis late, after it timed out and its grant was
// undone: the very case the deadline exists for (README, What Baton
// guarantees, "No hold nobody knows"). The master is killed right after a
// periodic sample, so the next one is about 5 s away.
func TestCallsOnAPromotedMasterCarryANotAfterDeadline(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	born := time.Now()
	s := newClusterStore(t, c, store.Options{Prefix: "cxc"})
	ctx := context.Background()
	name := namesOnEveryShard(t, c, "cxc", 1)[0]
	victim, err := c.MasterOf(ctx, "cxc:{"+name+"}")
	if err != nil {
		t.Fatal(err)
	}
	if s.NotAfter(name) == "" {
		t.Fatal("no clock estimate for a lock's master after Ready")
	}
	afterTickOf(born, 5*time.Second) // right after a clock sample (clockEvery)
	victim.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for m := s.MasterOf(name); m == victim.Addr() || m == ""; m = s.MasterOf(name) {
		if time.Now().After(deadline) {
			t.Fatal("the store's slot map never named the promoted master")
		}
		time.Sleep(5 * time.Millisecond) // the slot map is only visible by asking
	}
	promoted := time.Now()
	for s.NotAfter(name) == "" {
		if time.Since(promoted) > time.Second {
			for s.NotAfter(name) == "" && time.Since(promoted) < 6*time.Second {
				time.Sleep(10 * time.Millisecond) // the estimate is only visible by asking
			}
			t.Fatalf("calls on the promoted master %s went out without a \"not after\" deadline for %v",
				s.MasterOf(name), time.Since(promoted).Round(10*time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond) // the estimate is only visible by asking
	}
}

// A master SIGKILLed under every kind of long-poll (non-fair acquire, fair
// acquire, ticket poll, watch): those on its shard answer (503) within
// seconds, those on other shards keep waiting and are woken by releases; the
// undo cleaner empties its backlog on the promoted master; the pub/sub links
// end up on masters only, as many as baton_pubsub_connections says; and
// after Close nothing is left running.
func TestMasterKilledUnderEveryKindOfLongPoll(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	ctx := context.Background()
	before := runtime.NumGoroutine()
	rdb, err := redisconn.NewClient(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := store.New(rdb, store.Options{Prefix: "cxk", Metrics: m, WaitReplicas: 1, WaitTimeout: time.Second,
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
	names := namesOnEveryShard(t, c, "cxk", 1)
	victim, err := c.MasterOf(ctx, "cxk:{"+names[0]+"}")
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
		links, masters := s.PubSubLinks(), s.Masters()
		onMasters := true
		for _, l := range links {
			if !slices.Contains(masters, l) {
				onMasters = false
			}
		}
		if s.PendingUndos() == 0 && onMasters && float64(len(links)) == testutil.ToFloat64(m.PubSubConns) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("undos pending %d; links %v, masters %v, baton_pubsub_connections %v",
				s.PendingUndos(), links, masters, testutil.ToFloat64(m.PubSubConns))
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

// replicaOfEachMaster maps each master's address to its replica's node, on c now.
func replicaOfEachMaster(t *testing.T, c *redistest.Cluster) (masters []string, replicaOf map[string]*redistest.Server) {
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

// manualFailover promotes a replica (CLUSTER FAILOVER, no data lost) and
// waits until every node's slot map names it where it named its old master.
func manualFailover(t *testing.T, c *redistest.Cluster, replica *redistest.Server) {
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

// A listing paged across a failover (a graceful CLUSTER FAILOVER: nothing is
// lost, every lock stays held) still lists every held lock, as SCAN promises
// ("visits every key that exists from start to end of the iteration"). A
// cursor names its node by the first slot that node serves, and a hash of its
// address, not by its place among the masters' addresses, which the promoted
// replica's new address shifts: the next page goes on with whichever node
// serves that slot now and, that being another node, scans it from the start
// (a SCAN cursor means nothing on another node). The master failed over is
// one after the first, at the moment the cursor goes on with it.
func TestListingAcrossAFailoverListsEveryHeldLock(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	s := newClusterStore(t, c, store.Options{Prefix: "cxl"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "cxl", 4)
	for _, name := range names {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	masters, _ := replicaOfEachMaster(t, c)
	// Page until the cursor goes on with a master after the first (the pages
	// so far listed the ones before it), and fail that master over.
	listed := map[string]bool{}
	victim := ""
	page, err := s.List(ctx, store.ListRequest{Limit: 1})
	for ; err == nil && page.Next != ""; page, err = s.List(ctx, store.ListRequest{Limit: 1, Cursor: page.Next}) {
		for _, l := range page.Locks {
			listed[l.Name] = true
		}
		if n := s.CursorNode(ctx, page.Next); slices.Contains(masters, n) && len(listed) > 1 {
			victim = n
			break
		}
	}
	if err != nil || victim == "" {
		t.Fatalf("the listing never went on with a master after its first: %v", err)
	}
	_, replicaOf := replicaOfEachMaster(t, c)
	manualFailover(t, c, replicaOf[victim])
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

// The topology makes a client, with its own pool of connections, for each
// master it reaches directly (WAIT pipelines, TIME samples, pub/sub links).
// Once a node has served no slot for nodeGrace (a master demoted by a
// failover, a node gone for good), its client is closed and forgotten, and
// made again if the node comes back as a master; otherwise a demoted master
// would keep the store's idle connections for ever, and on a cluster whose
// nodes come and go (pods with new addresses) clients and connections would
// only grow. Here WaitReplicas gives the store a client for every master;
// after a manual failover the old master leaves both the slot map and the
// clients within a few loads.
func TestClientsOfDemotedMastersAreClosed(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{})
	s := newClusterStore(t, c, store.Options{Prefix: "cxn", WaitReplicas: 1, WaitTimeout: time.Second})
	ctx := context.Background()
	for _, name := range namesOnEveryShard(t, c, "cxn", 1) {
		if r, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: time.Minute}); err != nil || r.Lease == nil {
			t.Fatal(r, err)
		}
	}
	masters, replicaOf := replicaOfEachMaster(t, c)
	old := masters[0]
	if !slices.Contains(s.NodeClients(), old) {
		t.Fatalf("no client for master %s: %v", old, s.NodeClients())
	}
	manualFailover(t, c, replicaOf[old])
	deadline := time.Now().Add(8 * time.Second) // a few slot-map loads
	for slices.Contains(s.Masters(), old) || slices.Contains(s.NodeClients(), old) {
		if time.Now().After(deadline) {
			t.Fatalf("%s demoted, yet the store keeps a client for it: masters %v, clients %v",
				old, s.Masters(), s.NodeClients())
		}
		time.Sleep(20 * time.Millisecond) // only visible by asking
	}
}

// A shard's pub/sub connection killed (CLIENT KILL TYPE pubsub on that master
// only) just before a release there: the release's message is lost, and the
// renewed link's re-check wakes the waiter; the other shards' waiters are
// untouched.
func TestPubSubKilledOnOneShardStillWakesItsWaiter(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t, c, store.Options{Prefix: "cxp"})
	ctx := context.Background()
	names := namesOnEveryShard(t, c, "cxp", 1)
	victim, err := c.MasterOf(ctx, "cxp:{"+names[0]+"}")
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
		waiters[name] = startWaiter(t, s, name, 10*time.Second)
		m, _ := c.MasterOf(ctx, "cxp:{"+name+"}")
		awaitChannelOn(t, s, name, m.Addr())
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
