package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/internal/redistest"
)

// sentinelMaster is the master group name the sentinels monitor.
const sentinelMaster = "baton"

// sentinelDownAfter is the sentinels' down-after-milliseconds. At 1s, a newly
// promoted master that stalled for a second under the workload (on a 2-CPU
// machine) was judged down in turn, in two quick runs in a row: a second
// failover the runner did not cause, back to the old master (by then its
// replica), while the stalled one took writes until Baton followed the switch.
// Those writes were lost with no Loss in the history to excuse them. 3s leaves
// room for such a stall; a real deployment uses more.
const sentinelDownAfter = 3 * time.Second

// sentinelFailover is the Sentinel scenario: one master, one replica
// and three sentinels on loopback (quorum 2, down-after 3s, failover-timeout 2s);
// both Baton processes on the sentinel URL; the master killed with SIGKILL again
// and again while the workload runs, each time once the replica has caught up.
// Baton must follow each failover.
//
// The scenario list starts one redis-server and two Batons on it; this fault sets
// the rest up first: it starts the replica and the sentinels, then restarts each
// Baton (SIGTERM, as in a deploy) on the sentinel URL, with BATON_WAIT_REPLICAS=1
// when wait is set.
//
// Without WAIT, a grant acknowledged just before the kill and not yet replicated
// is lost in the failover: the one known limit of Redis. That scenario adds a
// Loss with an unknown outcome to the history for each failover (called at the
// kill), so that such a loss is not counted as a violation: the checker may free
// each lock once, at any moment after the kill, or not at all. With WAIT it is
// not added, and every lost grant is a violation. Both print the lost-lock rate
// as measured: canaries (runCanaries) and the workload's holds (lostLocks).
func sentinelFailover(wait bool) scenario {
	name := "sentinel-failover"
	if wait {
		name += "-wait"
	}
	return scenario{name: name, inject: func(ctx context.Context, r *trial) error {
		return runSentinel(ctx, r, name, wait)
	}}
}

// sentinelSet is the replica and sentinels a Sentinel scenario adds to its
// topology; nodes[0] is the topology's own redis-server, the first master.
type sentinelSet struct {
	log       *os.File // the scenario's timeline, sentinel/timeline.txt
	nodes     [2]*redistest.Server
	sentinels []*redistest.Sentinel
	clients   []*redis.Client // one per sentinel
}

func runSentinel(ctx context.Context, r *trial, name string, wait bool) error {
	start := time.Now()
	set, err := startSentinels(r)
	if err != nil {
		set.stop()
		return err
	}
	// The sampler follows the master from now on, as Baton does.
	r.samp.use(redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: set.addrs(),
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 2}))
	env := []string{"BATON_REDIS_URL=" + set.url()}
	if wait {
		env = append(env, "BATON_WAIT_REPLICAS=1", "BATON_WAIT_TIMEOUT=100ms")
	}
	exited := make([]chan struct{}, 0, len(r.top.batons))
	for _, b := range r.top.batons {
		b.stop()
		b.mu.Lock()
		b.env = append(b.env, env...) // the last of a repeated variable wins
		b.mu.Unlock()
		if err := b.start(); err != nil {
			set.stop()
			return err
		}
		b.mu.Lock()
		exited = append(exited, b.exited)
		b.mu.Unlock()
	}
	// The replica and sentinels must outlive the workload and the leak check:
	// they stop when the topology stops its Batons.
	go func() {
		for _, e := range exited {
			<-e
		}
		set.stop()
	}()

	var failovers []failover
	var lags []int64
	var canaries canaryTally
	// At most about five failovers a run: each outage (~2s) leaves the holders'
	// renewals and releases with unknown outcomes, and porcupine's search grows
	// with them (a full run with a kill every 7s left most locks inconclusive).
	err = every(ctx, max(r.cfg.redisEvery, r.cfg.duration/6), func() error {
		master, replica, lag, ok := set.ready(ctx)
		if !ok {
			return nil // not caught up in time: no kill this round
		}
		ctx := context.Background() // a failover begun is seen through
		stop := make(chan struct{})
		granted := make(chan []canary, 1)
		go func() { granted <- runCanaries(r, len(failovers), stop) }()
		time.Sleep(300 * time.Millisecond) // canaries granted right up to the kill
		killed := time.Now()
		master.Kill()
		close(stop)
		first, all, err := set.awaitMaster(replica.Addr())
		cs := <-granted
		if err != nil {
			return err
		}
		failovers = append(failovers, failover{killed: killed, promoted: first})
		lags = append(lags, lag)
		if !wait {
			// Holds the failover lost are excused, not required: the checker's Loss
			// frees the lock, and an unknown outcome lets it happen at any moment
			// after the kill, or in effect not at all.
			r.rec.Add(check.Op{Kind: check.Loss, Call: killed, Return: all, Outcome: check.Unknown, Client: -1,
				Detail: "sentinel failover without WAIT: holds not yet replicated may be lost"})
		}
		// The service is probed while the old master comes back, empty, as a
		// replica of the new one: what an operator or Sentinel itself would make
		// of it. Recovery is timed from the kill.
		recovered := make(chan struct{})
		go func() { r.fault(killed, killed, lostRedis, "master killed, Sentinel failover"); close(recovered) }()
		err = master.Restart()
		if err == nil {
			err = replicaOf(ctx, master, replica)
		}
		<-recovered
		back := time.Since(killed)
		ct := checkCanaries(r, cs, killed)
		canaries.add(ct)
		set.logf("failover %d: killed %s at %s (replica %d bytes behind); first sentinel named %s after %v, all after %v; "+
			"service recovered and old master a replica again after %v; %s",
			len(failovers), master.Addr(), killed.Format("15:04:05.000"), lag, replica.Addr(),
			first.Sub(killed).Round(time.Millisecond), all.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond), ct)
		if err != nil {
			return fmt.Errorf("restart old master: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	unacked := 0.0
	for _, b := range r.top.batons {
		if n := b.gauge(context.Background(), "baton_wait_unacked_total"); n > 0 {
			unacked += n
		}
	}
	// Holds of the last failover are judged by what the workload did until
	// their leases ran out: wait for the end of the workload.
	time.Sleep(time.Until(start.Add(r.cfg.duration)))
	lost := lostLocks(r.rec.Ops(), failovers, r.locks)
	line := fmt.Sprintf("%s: %d failovers; %s; workload %s; replica at most %d bytes behind at a kill",
		name, len(failovers), canaries, lost, maxOf(lags))
	if n := strings.Count(set.sentinels[0].Log(), "+switch-master "); n > len(failovers) {
		line += fmt.Sprintf("; %d failovers the runner did not cause (Sentinel judged a new master down): "+
			"what they rolled back has no Loss in the history", n-len(failovers))
	}
	if wait {
		line += fmt.Sprintf("; %v grants WAIT did not see acknowledged (baton_wait_unacked_total)", unacked)
	} else {
		line += "; not counted as violations: Redis replicates asynchronously (BATON_WAIT_REPLICAS narrows this)"
	}
	fmt.Fprintln(os.Stdout, "  "+line)
	set.logf("%s", line)
	return nil
}

func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// startSentinels starts a replica of the topology's redis-server and three
// sentinels, and waits until each sentinel knows the replica and the other two.
func startSentinels(r *trial) (*sentinelSet, error) {
	set := &sentinelSet{}
	set.nodes[0] = r.top.redis
	dir := filepath.Join(r.top.batons[0].dir, "sentinel")
	if err := os.MkdirAll(filepath.Join(dir, "replica"), 0o755); err != nil {
		return set, err
	}
	var err error
	if set.log, err = os.Create(filepath.Join(dir, "timeline.txt")); err != nil {
		return set, err
	}
	ctx := context.Background()
	if err := r.top.rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return set, err
	}
	rep, err := redistest.StartServer(filepath.Join(dir, "replica"), "--replicaof", "127.0.0.1", strconv.Itoa(r.top.redis.Port),
		"--repl-diskless-sync-delay", "0")
	if err != nil {
		return set, err
	}
	set.nodes[1] = rep
	if err := redistest.AwaitLinkUp(ctx, rep.Addr(), 10*time.Second); err != nil {
		return set, err
	}
	for range 3 {
		s, err := redistest.StartSentinel(dir, redistest.SentinelConfig{
			MasterName: sentinelMaster, Master: r.top.redis.Addr(), Quorum: 2,
			DownAfter: sentinelDownAfter, FailoverTimeout: 2 * time.Second,
		})
		if err != nil {
			return set, err
		}
		set.sentinels = append(set.sentinels, s)
		set.clients = append(set.clients, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1}))
	}
	if _, _, _, ok := set.readyWithin(ctx, 20*time.Second); !ok {
		return set, errors.New("sentinels did not find the replica and each other within 20s")
	}
	set.logf("replica %s and sentinels %s ready", rep.Addr(), set.url())
	return set, nil
}

func (s *sentinelSet) url() string {
	return "redis+sentinel://" + strings.Join(s.addrs(), ",") + "/" + sentinelMaster
}

func (s *sentinelSet) addrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, x := range s.sentinels {
		addrs[i] = x.Addr()
	}
	return addrs
}

func (s *sentinelSet) logf(format string, args ...any) {
	if s.log != nil {
		fmt.Fprintf(s.log, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
}

func (s *sentinelSet) stop() {
	if s.log != nil {
		_ = s.log.Close()
	}
	for _, c := range s.clients {
		_ = c.Close()
	}
	for _, x := range s.sentinels {
		x.Stop()
	}
	if s.nodes[1] != nil {
		s.nodes[1].Stop()
	}
}

// ready waits (up to 20s) until a kill can fail over without losing what was
// acknowledged: every sentinel names the same master, sees the other two, and
// sees a replica up; the replica's link is up and it is at most 64 KiB behind
// (on loopback it is caught up). It returns the master, the replica, and the
// replica's lag in bytes.
func (s *sentinelSet) ready(ctx context.Context) (master, replica *redistest.Server, lag int64, ok bool) {
	return s.readyWithin(ctx, 20*time.Second)
}

func (s *sentinelSet) readyWithin(ctx context.Context, d time.Duration) (master, replica *redistest.Server, lag int64, ok bool) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; {
		if m, rep, lag, err := s.check(ctx); err == nil {
			return m, rep, lag, true
		}
		time.Sleep(50 * time.Millisecond) // Sentinel's view is only visible by asking
	}
	return nil, nil, 0, false
}

func (s *sentinelSet) check(ctx context.Context) (master, replica *redistest.Server, lag int64, err error) {
	var addr string
	for _, c := range s.clients {
		m, err := c.Do(ctx, "SENTINEL", "MASTER", sentinelMaster).Result()
		if err != nil {
			return nil, nil, 0, err
		}
		f := fields(m)
		a := net.JoinHostPort(f["ip"], f["port"])
		if addr != "" && a != addr {
			return nil, nil, 0, errors.New("sentinels disagree on the master")
		}
		addr = a
		// A failover still in progress (or replicas still being reconfigured
		// after one) is not a settled setup: kill now, and what is lost is
		// another story than asynchronous replication.
		if f["num-other-sentinels"] != "2" || f["num-slaves"] == "0" ||
			strings.Contains(f["flags"], "down") || strings.Contains(f["flags"], "failover") {
			return nil, nil, 0, fmt.Errorf("sentinel view not settled: %v", f)
		}
		reps, err := c.Do(ctx, "SENTINEL", "REPLICAS", sentinelMaster).Result()
		if err != nil {
			return nil, nil, 0, err
		}
		up := 0
		for _, x := range reps.([]any) {
			rf := fields(x)
			// Not master-link-status: Sentinel refreshes a replica's INFO only every
			// 10s; the link itself is checked on the replica below.
			if !strings.Contains(rf["flags"], "down") && !strings.Contains(rf["flags"], "disconnected") &&
				!strings.Contains(rf["flags"], "reconf") && !strings.Contains(rf["flags"], "promoted") {
				up++
			}
		}
		if up == 0 {
			return nil, nil, 0, errors.New("no replica up in a sentinel's view")
		}
	}
	for i, n := range s.nodes {
		if n.Addr() == addr {
			master, replica = n, s.nodes[1-i]
		}
	}
	if master == nil {
		return nil, nil, 0, fmt.Errorf("sentinels name an unknown master %s", addr)
	}
	mo, err := replOffset(ctx, master.Addr(), "master_repl_offset")
	if err != nil {
		return nil, nil, 0, err
	}
	ro, err := replOffset(ctx, replica.Addr(), "slave_repl_offset")
	if err != nil {
		return nil, nil, 0, err
	}
	if ro < 0 || mo-ro > 1<<16 {
		return nil, nil, 0, fmt.Errorf("replica behind by %d bytes", mo-ro)
	}
	return master, replica, max(mo-ro, 0), nil
}

// fields reads a Sentinel reply, a flat list or a RESP3 map, into a map.
func fields(v any) map[string]string {
	f := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			f[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, v := range x {
			f[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return f
}

// replOffset reads one offset from INFO replication; -1 when absent (a replica
// whose link is down).
func replOffset(ctx context.Context, addr, field string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	if field == "slave_repl_offset" && !strings.Contains(info, "master_link_status:up") {
		return -1, nil
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return -1, nil
}

// awaitMaster waits until every sentinel names addr as the master, and returns
// when one first did (no Baton can reach the new master before) and when all
// did.
func (s *sentinelSet) awaitMaster(addr string) (first, all time.Time, err error) {
	ctx := context.Background()
	for deadline := time.Now().Add(probeTimeout); time.Now().Before(deadline); {
		named := 0
		for _, c := range s.clients {
			a, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster).StringSlice()
			if err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == addr {
				named++
			}
		}
		if named > 0 && first.IsZero() {
			first = time.Now()
		}
		if named == len(s.clients) {
			return first, time.Now(), nil
		}
		time.Sleep(20 * time.Millisecond) // Sentinel's view is only visible by asking
	}
	return first, all, fmt.Errorf("sentinels did not fail over to %s within %v", addr, probeTimeout)
}

// replicaOf makes the restarted server a replica of the master and waits until
// its link is up.
func replicaOf(ctx context.Context, s, master *redistest.Server) error {
	m := redis.NewClient(&redis.Options{Addr: master.Addr(), MaxRetries: -1})
	defer m.Close()
	if err := m.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return fmt.Errorf("config set: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port)).Err(); err != nil {
		return fmt.Errorf("replicaof: %w", err)
	}
	return redistest.AwaitLinkUp(ctx, s.Addr(), 20*time.Second)
}
