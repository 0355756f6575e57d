package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/redistest"
)

// The cluster scenario: Baton over one redis-server against Baton
// over a Redis Cluster of clusterMasters masters (no replicas, like the single
// Redis), on the same machine, the cluster's nodes pinned with the serving side.
// Uncontended pairs over distinct names, which the hash tag {name} spreads over
// the masters' slots, and the waiters scenario on the cluster, where Baton keeps
// one SSUBSCRIBE connection per master.
const (
	clusterMasters = 3
	sysBatonSingle = "baton"         // over the one redis-server
	sysBatonClust  = "baton-cluster" // over the cluster
)

// clusterRow is one system's uncontended figures in the cluster scenario.
type clusterRow struct {
	Scenario    string    `json:"scenario"`
	System      string    `json:"system"`
	Redis       string    `json:"redis"`
	Concurrency int       `json:"concurrency"`
	OpsPerSec   float64   `json:"ops_per_sec"`
	P50         float64   `json:"p50_ms"`
	P99         float64   `json:"p99_ms"`
	ServerCPU   float64   `json:"server_cpu_us_per_op"` // Baton and every redis-server it uses
	Shards      int       `json:"shards"`               // masters the measured names' slots fell on
	ShardShare  []float64 `json:"shard_share_percent"`  // the names per master, in % (cluster only)
	OtherLoad   float64   `json:"other_load_percent"`
}

// slotMap is which master serves each slot, as CLUSTER SLOTS says.
type slotMap struct {
	owner   [16384]int // slot -> index into addrs
	addrs   []string   // masters
	counts  []atomic.Int64
	counted bool
}

func loadSlotMap(ctx context.Context, seed string) (*slotMap, error) {
	rdb := newRedisClient(seed)
	defer rdb.Close()
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	m := &slotMap{}
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		i := slices.Index(m.addrs, r.Nodes[0].Addr)
		if i < 0 {
			i = len(m.addrs)
			m.addrs = append(m.addrs, r.Nodes[0].Addr)
		}
		for s := r.Start; s <= r.End; s++ {
			m.owner[s] = i
		}
	}
	m.counts = make([]atomic.Int64, len(m.addrs))
	return m, nil
}

// count wraps pair to count each name on the master of its slot.
func (m *slotMap) count(pair pairFunc) pairFunc {
	m.counted = true
	return func(ctx context.Context, name string) error {
		m.counts[m.owner[redistest.Slot("{"+name+"}")]].Add(1)
		return pair(ctx, name)
	}
}

// spread is how many masters got names since the last reset, and each one's share.
func (m *slotMap) spread() (shards int, share []float64) {
	var total int64
	for i := range m.counts {
		total += m.counts[i].Load()
	}
	for i := range m.counts {
		n := m.counts[i].Load()
		if n > 0 {
			shards++
		}
		if total > 0 {
			share = append(share, round(100*float64(n)/float64(total), 1))
		}
	}
	return shards, share
}

func (m *slotMap) reset() {
	for i := range m.counts {
		m.counts[i].Store(0)
	}
}

// clusterEnv is the cluster and its Baton, while the scenario runs.
type clusterEnv struct {
	cl      *redistest.Cluster
	dir     string
	pids    []int // the masters' redis-server processes
	baton   *proc
	url     string
	slots   *slotMap
	masters []string
}

// startCluster starts a clusterMasters-master cluster without replicas, pins
// its nodes with the serving side, and starts a Baton on it.
func (e *env) startCluster(ctx context.Context) (ce *clusterEnv, err error) {
	ce = &clusterEnv{dir: filepath.Join(e.dir, "cluster")}
	defer func() {
		if err != nil {
			e.stopCluster(ce)
		}
	}()
	if err := os.MkdirAll(ce.dir, 0o755); err != nil {
		return ce, err
	}
	fmt.Printf("starting a %d-master redis cluster ...\n", clusterMasters)
	if ce.cl, err = redistest.StartClusterIn(ce.dir, redistest.ClusterConfig{Masters: clusterMasters, ReplicasPer: -1}); err != nil {
		return ce, err
	}
	for _, s := range ce.cl.Nodes {
		pid, err := redisPID(ctx, s.Addr())
		if err != nil {
			return ce, err
		}
		if e.pinned {
			if err := pinProcess(pid, serverCPU); err != nil {
				return ce, err
			}
		}
		ce.pids = append(ce.pids, pid)
		ce.masters = append(ce.masters, s.Addr())
		e.pin.Processes[fmt.Sprintf("redis-cluster-node-%d", len(ce.pids))] = allowedCPUs(pid)
	}
	e.clusterPIDs = slices.Clone(ce.pids)
	if ce.slots, err = loadSlotMap(ctx, ce.cl.Nodes[0].Addr()); err != nil {
		return ce, err
	}
	if err := e.startClusterBaton(ctx, ce); err != nil {
		return ce, err
	}
	return ce, nil
}

func (e *env) startClusterBaton(ctx context.Context, ce *clusterEnv) (err error) {
	if ce.baton, ce.url, err = e.startBaton(ctx, "BATON_REDIS_URL="+ce.cl.URL()); err != nil {
		return err
	}
	e.clusterPIDs = append(slices.Clone(ce.pids), ce.baton.pid())
	e.pin.Processes[sysBatonClust] = allowedCPUs(ce.baton.pid())
	return nil
}

func (e *env) stopClusterBaton(ce *clusterEnv) {
	if ce.baton != nil {
		ce.baton.stop(10 * time.Second)
		ce.baton = nil
	}
	e.clusterPIDs = slices.Clone(ce.pids)
}

func (e *env) stopCluster(ce *clusterEnv) {
	e.stopClusterBaton(ce)
	if ce.cl != nil {
		ce.cl.Stop()
	}
	e.clusterPIDs = nil
}

// runClusterAll measures Baton over one Redis and over the cluster,
// interleaved, at each of the mode's concurrencies, runs times (medians), then
// holds the mode's waiters on a fresh Baton over the cluster.
func runClusterAll(ctx context.Context, e *env, cfg config, res *results) error {
	if !cfg.wantSystem(sysBaton) {
		return nil
	}
	if _, err := redistest.CLIBinary(); err != nil {
		return err
	}
	ce, err := e.startCluster(ctx)
	if err != nil {
		return err
	}
	defer e.stopCluster(ce)
	res.clusterNote = fmt.Sprintf("%d masters, no replicas, slots %s", len(ce.slots.addrs), strings.Join(slotRanges(ce.slots), "; "))

	type sys struct {
		name, redis string
		pair        pairFunc
		pids        []int
	}
	systems := []sys{
		{sysBatonSingle, "1 redis-server", batonPair(client.New(e.batonURL), 0), e.batonPIDs()},
		{sysBatonClust, fmt.Sprintf("cluster of %d masters", clusterMasters), ce.slots.count(batonPair(client.New(ce.url), 0)), append([]int{ce.baton.pid()}, ce.pids...)},
	}
	type key struct {
		sys string
		c   int
	}
	runs := map[key][]uncRun{}
	loads := map[key][]float64{}
	shards := map[key][]int{}
	shares := map[key][]float64{}
	for r := range cfg.runs {
		for _, s := range systems {
			for _, c := range cfg.clusterConcurrency {
				ce.slots.reset()
				m := e.mark()
				u, err := uncontended(ctx, target{system: s.name, pair: s.pair, pids: s.pids}, c, cfg.warmup, cfg.duration, 0, fmt.Sprintf("k%d-%s-c%d", r, s.name, c))
				if err != nil {
					return err
				}
				other := e.otherLoad(m, e.mark())
				k := key{s.name, c}
				runs[k] = append(runs[k], u)
				loads[k] = append(loads[k], other)
				n, share := 1, []float64(nil)
				if s.name == sysBatonClust {
					n, share = ce.slots.spread()
					shares[k] = share
				}
				shards[k] = append(shards[k], n)
				fmt.Printf("cluster run %d/%d %-13s c=%-3d %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair  shards %d %v  other_load %4.1f%%\n",
					r+1, cfg.runs, s.name, c, u.ops, u.p50, u.p99, u.cpuPerOp, n, share, other)
			}
		}
	}
	for _, s := range systems {
		for _, c := range cfg.clusterConcurrency {
			k := key{s.name, c}
			rs := runs[k]
			pick := func(f func(uncRun) float64) float64 {
				xs := make([]float64, len(rs))
				for i, u := range rs {
					xs[i] = f(u)
				}
				return median(xs)
			}
			row := clusterRow{Scenario: "cluster", System: s.name, Redis: s.redis, Concurrency: c,
				OpsPerSec:  round(pick(func(u uncRun) float64 { return u.ops }), 0),
				P50:        round(pick(func(u uncRun) float64 { return u.p50 }), 3),
				P99:        round(pick(func(u uncRun) float64 { return u.p99 }), 3),
				ServerCPU:  round(pick(func(u uncRun) float64 { return u.cpuPerOp }), 1),
				Shards:     slices.Min(shards[k]),
				ShardShare: shares[k],
				OtherLoad:  round(median(loads[k]), 1),
			}
			res.Cluster = append(res.Cluster, row)
			fmt.Printf("cluster %-13s c=%-3d median of %d: %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair  shards %d  other_load %4.1f%%\n",
				s.name, c, len(rs), row.OpsPerSec, row.P50, row.P99, row.ServerCPU, row.Shards, row.OtherLoad)
		}
	}

	// Waiters: a fresh Baton on the cluster per level; the uncontended one is
	// stopped, so that every connection to the masters not made by this
	// program is the measured Baton's.
	e.stopClusterBaton(ce)
	for _, n := range cfg.clusterWaiters {
		m := e.mark()
		row, err := waitersLevel(ctx, e, cfg, n, []string{"BATON_REDIS_URL=" + ce.cl.URL()}, ce.masters)
		if err != nil {
			return fmt.Errorf("%d waiters on the cluster: %w", n, err)
		}
		row.Scenario, row.System = "cluster_waiters", sysBatonClust
		row.Shards = len(ce.masters)
		row.OtherLoad = round(e.otherLoad(m, e.mark()), 1)
		res.ClusterWaiters = append(res.ClusterWaiters, row)
		fmt.Printf("cluster waiters %6d long-polls: %6.0f B RSS each  %d redis connections (%d pub/sub) over %d masters  idle CPU %.2f%%  other_load %4.1f%%\n",
			row.Waiters, row.RSSPerWaiter, row.RedisConns, row.PubSubConns, row.Shards, row.IdleCPU, row.OtherLoad)
		if row.PubSubConns > row.Shards {
			res.failures = append(res.failures, fmt.Sprintf("cluster waiters: %d pub/sub connections over %d masters, want at most one per master", row.PubSubConns, row.Shards))
		}
	}
	return nil
}

// slotRanges are each master's slot ranges, "addr a-b".
func slotRanges(m *slotMap) []string {
	var out []string
	for i, a := range m.addrs {
		var rs []string
		for s := 0; s < len(m.owner); {
			if m.owner[s] != i {
				s++
				continue
			}
			t := s
			for t+1 < len(m.owner) && m.owner[t+1] == i {
				t++
			}
			rs = append(rs, fmt.Sprintf("%d-%d", s, t))
			s = t + 1
		}
		out = append(out, a+" "+strings.Join(rs, ","))
	}
	return out
}

// clusterTable is the cluster section of the table, or "".
func (r *results) clusterTable() string {
	if len(r.Cluster) == 0 && len(r.ClusterWaiters) == 0 {
		return ""
	}
	var b strings.Builder
	if len(r.Cluster) > 0 {
		b.WriteString("### cluster: Baton over 1 redis-server and over a Redis Cluster, uncontended, distinct names (median of runs)\n\n")
		if r.clusterNote != "" {
			b.WriteString("Cluster: " + r.clusterNote + ". Every node pinned with the serving side.\n\n")
		}
		var rows [][]string
		for _, x := range r.Cluster {
			share := "-"
			if len(x.ShardShare) > 0 {
				var ps []string
				for _, p := range x.ShardShare {
					ps = append(ps, f1(p))
				}
				share = strings.Join(ps, " / ")
			}
			rows = append(rows, []string{x.System, x.Redis, fmt.Sprint(x.Concurrency), f0(x.OpsPerSec), f3(x.P50), f3(x.P99), f1(x.ServerCPU), fmt.Sprint(x.Shards), share, f1(x.OtherLoad)})
		}
		b.WriteString(mdTable([]string{"system", "redis", "concurrency", "pairs/s", "p50 ms", "p99 ms", "server CPU µs/pair", "shards", "names per shard %", "other load %"}, rows))
		b.WriteString("\nServer CPU: Baton and every redis-server it uses.\n\n")
	}
	if len(r.ClusterWaiters) > 0 {
		b.WriteString("### cluster waiters: long-polls held by one Baton over the cluster (non-fair acquires, wait 10 min, 100 held locks)\n\n")
		var rows [][]string
		for _, x := range r.ClusterWaiters {
			rows = append(rows, []string{fmt.Sprint(x.Waiters), f0(x.RSSPerWaiter), fmt.Sprint(x.Shards), fmt.Sprint(x.RedisConns), fmt.Sprint(x.PubSubConns), f2(x.IdleCPU), f1(x.OtherLoad)})
		}
		b.WriteString(mdTable([]string{"waiters", "RSS B/waiter", "masters", "redis connections (all masters)", "pub/sub", "idle CPU %", "other load %"}, rows))
		b.WriteString("\n")
	}
	return b.String()
}
