package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// Rows of results.json, one type per scenario, with exactly that scenario's
// fields. Unexported fields are for the table only.

type uncontendedRow struct {
	Scenario     string  `json:"scenario"`
	System       string  `json:"system"`
	Durability   string  `json:"durability"`
	Concurrency  int     `json:"concurrency"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50          float64 `json:"p50_ms"`
	P99          float64 `json:"p99_ms"`
	ServerCPU    float64 `json:"server_cpu_us_per_op"`
	ProcessCPU   float64 `json:"process_cpu_us_per_op,omitempty"` // the server process alone (Baton, hello): /proc
	RedisCPU     float64 `json:"redis_cpu_us_per_op,omitempty"`   // its redis-server alone: INFO used_cpu_sys + used_cpu_user
	OtherLoad    float64 `json:"other_load_percent"`              // median over the runs of other processes' share of the machine's CPU
	generatorCPU float64 // percent of one CPU
}

type handoffRow struct {
	Scenario   string  `json:"scenario"`
	System     string  `json:"system"`
	Waiters    int     `json:"waiters"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	Inversions int     `json:"inversions"`
	grants     int
}

// sharedRow is the shared scenario: Clients clients taking and releasing shared
// holds on one lock (pairs/s, latency per pair, server CPU per pair), and runs of
// Tickets queued shared tickets that one exclusive release grants together
// (from the release sent to the first, and the last, of them holding).
type sharedRow struct {
	Scenario     string  `json:"scenario"`
	System       string  `json:"system"`
	Clients      int     `json:"clients"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50          float64 `json:"p50_ms"`
	P99          float64 `json:"p99_ms"`
	ServerCPU    float64 `json:"server_cpu_us_per_op"`
	Tickets      int     `json:"run_tickets"`
	FirstP50     float64 `json:"run_first_p50_ms"`
	LastP50      float64 `json:"run_last_p50_ms"`
	LastP99      float64 `json:"run_last_p99_ms"`
	Rounds       int     `json:"run_rounds"`
	generatorCPU float64 // percent of one CPU
}

type waitersRow struct {
	Scenario     string  `json:"scenario"`
	System       string  `json:"system"`
	Waiters      int     `json:"waiters"`
	RSSPerWaiter float64 `json:"rss_bytes_per_waiter"`
	// RSSPerWaiterAfterGC: the same once Go has collected the garbage the
	// waiters' arrival left (waiters.go, settledRSS).
	RSSPerWaiterAfterGC float64 `json:"rss_bytes_per_waiter_after_gc,omitempty"`
	// HeapPerWaiter: the heap in use after a GC, less the baseline's, per waiter.
	HeapPerWaiter float64 `json:"heap_bytes_per_waiter_after_gc,omitempty"`
	RedisConns    int     `json:"redis_connections"`
	PubSubConns   int     `json:"pubsub_connections"`
	IdleCPU       float64 `json:"idle_cpu_percent"`
	// RedisIdleCmds: commands a second the Redis servers processed while the
	// waiters were idle: Baton's own (pub/sub health pings, clock samples);
	// a waiter costs Redis nothing while it waits.
	RedisIdleCmds float64 `json:"redis_idle_commands_per_s"`
	// OpenSeconds: from the first open to every one waiting or refused.
	OpenSeconds float64 `json:"open_seconds"`
	// Refused: opens the server answered with a problem, by its kind.
	Refused   map[string]int `json:"refused,omitempty"`
	Shards    int            `json:"shards,omitempty"`             // cluster_waiters: the masters
	OtherLoad float64        `json:"other_load_percent,omitempty"` // cluster_waiters

	rssBefore, rssWith int64
}

// expiryRow: every time on the client's clock, latencies signed (never
// clipped at 0).
type expiryRow struct {
	Scenario string  `json:"scenario"`
	System   string  `json:"system"`
	Clock    string  `json:"clock"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Min      float64 `json:"min_ms"`
	Negative int     `json:"negative"`     // repetitions whose latency came out below 0 (measurement: see expiryObs)
	Early    int     `json:"early_grants"` // waiters granted before the holder's lease could have ended: bugs
	reps     int
}

// setup records how the systems were configured.
type setup struct {
	Redis      string `json:"redis"`
	EtcdData   string `json:"etcd_data_dir"`
	Baton      string `json:"baton"`
	Runs       int    `json:"runs"`
	Duration   string `json:"uncontended_run"`
	Loop       string `json:"uncontended_loop"`
	Names      string `json:"names"`
	Durability string `json:"uncontended_durability"`
	Reference  string `json:"reference,omitempty"`
}

// otherLoad is how busy the machine was with processes not of this run: they
// share the CPUs with what is measured, so they perturb the figures.
type otherLoad struct {
	Run       float64            `json:"percent_of_machine_cpu"`             // over the whole run
	Scenarios map[string]float64 `json:"percent_of_machine_cpu_by_scenario"` // over each scenario
	Start     string             `json:"load_average_start"`
	End       string             `json:"load_average_end"`
}

// goal is one of issue 4's goals, judged on this run's figures.
type goal struct {
	Goal   string `json:"goal"`
	Got    string `json:"got"`
	Status string `json:"status"` // PASS, MISS, or "not measured"
}

type results struct {
	Machine string    `json:"machine"`
	When    string    `json:"when"`
	Mode    string    `json:"mode"`
	Pinning pinning   `json:"pinning"`
	Setup   setup     `json:"setup"`
	Load    otherLoad `json:"other_load"`

	Commands       []commandsRow    `json:"-"`
	Uncontended    []uncontendedRow `json:"-"`
	Handoff        []handoffRow     `json:"-"`
	Shared         []sharedRow      `json:"-"`
	Waiters        []waitersRow     `json:"-"`
	Expiry         []expiryRow      `json:"-"`
	Names          []namesRow       `json:"-"`
	Cluster        []clusterRow     `json:"-"`
	ClusterWaiters []waitersRow     `json:"-"`
	Goals          []goal           `json:"goals"`
	Budgets        []budget         `json:"budgets"`

	info         machine
	elapsed      time.Duration
	waitersBound string   // what bounded the largest waiters level
	clusterNote  string   // the cluster's shape
	failures     []string // checks that make the run fail once its results are written
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func (r *results) writeJSON(path string) error {
	rows := []any{}
	for _, x := range r.Commands {
		rows = append(rows, x)
	}
	for _, x := range r.Uncontended {
		rows = append(rows, x)
	}
	for _, x := range r.Handoff {
		rows = append(rows, x)
	}
	for _, x := range r.Shared {
		rows = append(rows, x)
	}
	for _, x := range r.Waiters {
		rows = append(rows, x)
	}
	for _, x := range r.Expiry {
		rows = append(rows, x)
	}
	for _, x := range r.Names {
		rows = append(rows, x)
	}
	for _, x := range r.Cluster {
		rows = append(rows, x)
	}
	for _, x := range r.ClusterWaiters {
		rows = append(rows, x)
	}
	type out struct {
		*results
		Results []any `json:"results"`
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out{r, rows}); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// unc is the row of sys at concurrency c, of the memory cell when there is one
// (rows are in order, memory first).
func (r *results) unc(sys string, c int) *uncontendedRow {
	for i := range r.Uncontended {
		if x := &r.Uncontended[i]; x.System == sys && x.Concurrency == c {
			return x
		}
	}
	return nil
}

// uncD is the row of sys at concurrency c in durability cell dur.
func (r *results) uncD(sys, dur string, c int) *uncontendedRow {
	for i := range r.Uncontended {
		if x := &r.Uncontended[i]; x.System == sys && x.Durability == dur && x.Concurrency == c {
			return x
		}
	}
	return nil
}

// etcdBest is etcd's best configuration in cell dur at concurrency c, per figure:
// the client style (etcd, one-shot, or etcd-lease) with the most pairs/s, and the
// one with the least server CPU per pair.
func (r *results) etcdBest(dur string, c int) (ops, cpu *uncontendedRow) {
	for _, sys := range []string{sysEtcd, sysEtcdLease} {
		x := r.uncD(sys, dur, c)
		if x == nil {
			continue
		}
		if ops == nil || x.OpsPerSec > ops.OpsPerSec {
			ops = x
		}
		if x.ServerCPU > 0 && (cpu == nil || x.ServerCPU < cpu.ServerCPU) {
			cpu = x
		}
	}
	return ops, cpu
}

func (r *results) hand(sys string, n int) *handoffRow {
	for i := range r.Handoff {
		if x := &r.Handoff[i]; x.System == sys && x.Waiters == n {
			return x
		}
	}
	return nil
}

func (r *results) wait(n int) *waitersRow {
	for i := range r.Waiters {
		if x := &r.Waiters[i]; x.Waiters == n {
			return x
		}
	}
	return nil
}

func (r *results) exp(sys string) *expiryRow {
	for i := range r.Expiry {
		if x := &r.Expiry[i]; x.System == sys {
			return x
		}
	}
	return nil
}

func status(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

const notMeasured = "not measured"

// evaluateGoals judges the goals of issue 4 on ratios measured in this run.
func evaluateGoals(r *results) []goal {
	var gs []goal
	add := func(name string, measured bool, got string, ok bool) {
		g := goal{Goal: name, Got: got, Status: notMeasured}
		if measured {
			g.Status = status(ok)
		} else {
			g.Got = ""
		}
		gs = append(gs, g)
	}
	for _, dur := range []string{durMemory, durDurable} {
		for _, c := range []int{16, 64} {
			b := r.uncD(sysBaton, dur, c)
			if b == nil && dur == durDurable {
				continue // the durable cell runs at fewer concurrencies
			}
			ops, cpu := r.etcdBest(dur, c)
			name := fmt.Sprintf("uncontended %s c=%d: baton >= 3x the throughput of etcd's best style", dur, c)
			if b != nil && ops != nil && ops.OpsPerSec > 0 {
				x := b.OpsPerSec / ops.OpsPerSec
				add(name, true, fmt.Sprintf("%.2fx (%.0f vs %s %.0f pairs/s)", x, b.OpsPerSec, ops.System, ops.OpsPerSec), x >= 3)
			} else {
				add(name, false, "", false)
			}
			name = fmt.Sprintf("uncontended %s c=%d: baton server CPU/pair <= 1/4 of etcd's best style", dur, c)
			if b != nil && cpu != nil {
				x := b.ServerCPU / cpu.ServerCPU
				add(name, true, fmt.Sprintf("%.2f of etcd's (%.0f vs %s %.0f µs/pair)", x, b.ServerCPU, cpu.System, cpu.ServerCPU), x <= 0.25)
			} else {
				add(name, false, "", false)
			}
			if dur != durMemory {
				continue
			}
			s := r.uncD(sysRedisScript, dur, c)
			name = fmt.Sprintf("uncontended %s c=%d: baton >= 25%% of redis-script throughput", dur, c)
			if b != nil && s != nil && s.OpsPerSec > 0 {
				x := b.OpsPerSec / s.OpsPerSec
				add(name, true, fmt.Sprintf("%.1f%% (%.0f vs %.0f pairs/s)", 100*x, b.OpsPerSec, s.OpsPerSec), x >= 0.25)
			} else {
				add(name, false, "", false)
			}
		}
	}
	b, e := r.hand(sysBaton, 16), r.hand(sysEtcd, 16)
	add("handoff 16 waiters: baton p50 <= 1 ms", b != nil, gotMs(b, func(h *handoffRow) float64 { return h.P50 }), b != nil && b.P50 <= 1)
	add("handoff 16 waiters: baton p99 <= 3 ms", b != nil, gotMs(b, func(h *handoffRow) float64 { return h.P99 }), b != nil && b.P99 <= 3)
	if b != nil {
		add("handoff 16 waiters: baton zero inversions", true, fmt.Sprintf("%d in %d grants", b.Inversions, b.grants), b.Inversions == 0)
	} else {
		add("handoff 16 waiters: baton zero inversions", false, "", false)
	}
	if b != nil && e != nil && b.P50 > 0 {
		x := e.P50 / b.P50
		add("handoff 16 waiters: baton >= 5x faster than etcd (p50)", true,
			fmt.Sprintf("%.1fx (p50 %.3f vs %.3f ms; p99 %.1fx)", x, b.P50, e.P50, e.P99/max(b.P99, 1e-9)), x >= 5)
	} else {
		add("handoff 16 waiters: baton >= 5x faster than etcd (p50)", false, "", false)
	}
	w, at := r.wait(20000), ""
	if w == nil && len(r.Waiters) > 0 && r.Waiters[len(r.Waiters)-1].Waiters > 10000 {
		// The machine did not allow 20000 (see waitersBound): judge the largest level.
		w = &r.Waiters[len(r.Waiters)-1]
		at = fmt.Sprintf(" at %d waiters, the most this machine allows", w.Waiters)
	}
	if w != nil {
		add("waiters 20000: <= 16 KiB RSS per waiter", true, fmt.Sprintf("%.0f B%s", w.RSSPerWaiter, at), w.RSSPerWaiter <= 16384)
		add("waiters 20000: < 8 KiB RSS per waiter once Go has collected the arrival's garbage (issue 15)", w.RSSPerWaiterAfterGC > 0,
			fmt.Sprintf("%.0f B%s", w.RSSPerWaiterAfterGC, at), w.RSSPerWaiterAfterGC < 8192)
		add("waiters 20000: <= 2 pub/sub connections to Redis", true,
			fmt.Sprintf("%d pub/sub (%d connections in all)%s", w.PubSubConns, w.RedisConns, at), w.PubSubConns <= 2)
		add("waiters 20000: < 2% CPU while idle", true, fmt.Sprintf("%.2f%%%s", w.IdleCPU, at), w.IdleCPU < 2)
		add("waiters 20000: Redis sees < 5 commands/s while they wait (none per waiter)", true,
			fmt.Sprintf("%.1f/s%s", w.RedisIdleCmds, at), w.RedisIdleCmds < 5)
		refused := 0
		for _, k := range w.Refused {
			refused += k
		}
		add("waiters 20000: every open of the burst waits (none refused, no 503)", true,
			fmt.Sprintf("%d refused %v, opened in %.1f s%s", refused, w.Refused, w.OpenSeconds, at), refused == 0)
	} else {
		for _, g := range []string{"waiters 20000: <= 16 KiB RSS per waiter", "waiters 20000: <= 2 pub/sub connections to Redis", "waiters 20000: < 2% CPU while idle",
			"waiters 20000: Redis sees < 5 commands/s while they wait (none per waiter)", "waiters 20000: every open of the burst waits (none refused, no 503)"} {
			add(g, false, "", false)
		}
	}
	x := r.exp(sysBaton)
	add("expiry_handoff: baton p99 <= 50 ms", x != nil, gotExp(x), x != nil && x.P99 <= 50)
	for _, w := range r.ClusterWaiters {
		add(fmt.Sprintf("cluster waiters %d: one pub/sub connection per master", w.Waiters), true,
			fmt.Sprintf("%d pub/sub over %d masters (%d connections in all)", w.PubSubConns, w.Shards, w.RedisConns), w.PubSubConns == w.Shards)
	}
	gs = append(gs, authGoals(r)...)
	return append(gs, namesGoals(r)...)
}

func gotMs(h *handoffRow, f func(*handoffRow) float64) string {
	if h == nil {
		return ""
	}
	return fmt.Sprintf("%.3f ms", f(h))
}

func gotExp(x *expiryRow) string {
	if x == nil {
		return ""
	}
	return fmt.Sprintf("%.1f ms (p50 %.1f ms)", x.P99, x.P50)
}
