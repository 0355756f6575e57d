package main

import (
	"fmt"
	"slices"
	"strings"
)

// refusedCell is the opens refused, by problem kind ("0" for none).
func refusedCell(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// mdTable renders a Markdown table with padded columns, readable as text too.
func mdTable(head []string, rows [][]string) string {
	w := make([]int, len(head))
	for i, h := range head {
		w[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			b.WriteString(" " + c + strings.Repeat(" ", w[i]-len([]rune(c))) + " |")
		}
		b.WriteString("\n")
	}
	line(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = strings.Repeat("-", w[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

func f0(x float64) string { return fmt.Sprintf("%.0f", x) }
func f1(x float64) string { return fmt.Sprintf("%.1f", x) }
func f2(x float64) string { return fmt.Sprintf("%.2f", x) }
func f3(x float64) string { return fmt.Sprintf("%.3f", x) }

// table is the figures, the ratios and the goals, as Markdown tables.
func (r *results) table() string {
	var b strings.Builder
	b.WriteString(r.commandsTable())
	if len(r.Uncontended) > 0 {
		b.WriteString("### uncontended: acquire + release of distinct names (" + r.Setup.Loop + "; median of runs)\n\n")
		var rows [][]string
		for _, x := range r.Uncontended {
			rows = append(rows, []string{x.System, x.Durability, fmt.Sprint(x.Concurrency), f0(x.OpsPerSec), f3(x.P50), f3(x.P99), f1(x.ServerCPU),
				orDash(x.ProcessCPU), orDash(x.RedisCPU), f0(x.generatorCPU), f1(x.OtherLoad)})
		}
		b.WriteString(mdTable([]string{"system", "durability", "concurrency", "pairs/s", "p50 ms", "p99 ms", "server CPU µs/pair",
			"of which process", "Redis (INFO)", "generator CPU %", "other load %"}, rows))
		b.WriteString("\nGenerator CPU is this process's, in % of one CPU: near 100% the figure is bounded by the load generator, not the server. " +
			"Other load is the share of the machine's CPU (all CPUs) that processes not of this run took during the system's runs (median): " +
			"above a few % the figures are perturbed. Process: the server process alone (Baton, hello), from /proc; Redis: its redis-server's own count " +
			"(INFO used_cpu_sys + used_cpu_user), to the microsecond. etcd is the one-shot client (lease grant, lock, unlock, revoke: 4 calls a pair); " +
			"etcd-lease keeps one lease per client (lock, unlock: 2 calls a pair).\n\n")
		b.WriteString(r.durabilityTable())
		b.WriteString(r.authTable())
	}
	if len(r.Handoff) > 0 {
		b.WriteString("### handoff: release sent -> next queued waiter holds the lock (median of runs; inversions summed)\n\n")
		var rows [][]string
		for _, x := range r.Handoff {
			ratio := "-"
			if e := r.hand(sysEtcd, x.Waiters); e != nil && x.System == sysBaton && x.P50 > 0 {
				ratio = f1(e.P50/x.P50) + "x"
			}
			rows = append(rows, []string{x.System, fmt.Sprint(x.Waiters), f3(x.P50), f3(x.P99), fmt.Sprintf("%d / %d", x.Inversions, x.grants), ratio})
		}
		b.WriteString(mdTable([]string{"system", "waiters", "p50 ms", "p99 ms", "inversions / grants", "etcd p50 / baton p50"}, rows))
		b.WriteString("\n")
	}
	b.WriteString(r.sharedTable())
	if len(r.Waiters) > 0 {
		b.WriteString("### waiters: long-polls held by one Baton process (non-fair acquires, wait 10 min, 100 held locks)\n\n")
		var rows [][]string
		for _, x := range r.Waiters {
			rows = append(rows, []string{fmt.Sprint(x.Waiters), f1(x.OpenSeconds), refusedCell(x.Refused), f0(x.RSSPerWaiter), f0(x.RSSPerWaiterAfterGC),
				f0(x.HeapPerWaiter), fmt.Sprintf("%.0f -> %.0f", float64(x.rssBefore)/(1<<20), float64(x.rssWith)/(1<<20)),
				fmt.Sprint(x.RedisConns), fmt.Sprint(x.PubSubConns), f2(x.IdleCPU), f1(x.RedisIdleCmds)})
		}
		b.WriteString(mdTable([]string{"waiters", "opened in s", "refused", "RSS B/waiter", "after a GC", "live heap B/waiter", "RSS MiB",
			"redis connections", "pub/sub", "idle CPU %", "redis cmds/s idle"}, rows))
		b.WriteString("\nEach level opens its long-polls as fast as the helpers can (a burst); \"refused\" counts the opens " +
			"answered with a problem, by its type (any store-unavailable while Redis is up fails the run). " +
			"RSS is right after the burst and once a GC has run and the runtime has returned the pages; " +
			"the live heap is the heap in use after that GC.\n")
		if r.waitersBound != "" {
			b.WriteString("\nThe " + r.waitersBound + ".\n")
		}
		b.WriteString("\n")
	}
	if len(r.Expiry) > 0 {
		b.WriteString("### expiry_handoff: holder's lease end -> next grant, on the client's clock for both (median of runs; min and counts over all runs)\n\n")
		var rows [][]string
		for _, x := range r.Expiry {
			rows = append(rows, []string{x.System, fmt.Sprint(x.reps), f1(x.P50), f1(x.P99), f1(x.Min), fmt.Sprint(x.Negative), fmt.Sprint(x.Early)})
		}
		b.WriteString(mdTable([]string{"system", "repetitions", "p50 ms", "p99 ms", "min ms", "negative", "granted before the lease end (bugs)"}, rows))
		b.WriteString("\nLease end = the holder's answer's arrival + the TTL it gave; grant = the waiter's answer's arrival. " +
			"A negative figure is kept as it is (the holder's answer took longer to arrive than the waiter's); " +
			"a waiter whose answer arrived before the holder's request was sent + the TTL was granted during the lease, a bug that fails the run.\n\n")
	}
	b.WriteString(r.namesTable())
	b.WriteString(r.clusterTable())
	b.WriteString(r.loadNote() + "\n\n")
	issues := "issue 4, against etcd's best style per durability: issue 15; names: issue 16; cluster: issue 13"
	if len(authGoals(r)) > 0 {
		issues += "; access control: issue 9"
	}
	b.WriteString("### goals (" + issues + ")\n\n")
	var rows [][]string
	for _, g := range r.Goals {
		rows = append(rows, []string{g.Status, g.Goal, g.Got})
	}
	b.WriteString(mdTable([]string{"", "goal", "measured"}, rows))
	b.WriteString("\n")
	b.WriteString(r.budgetTable())
	return b.String()
}

func orDash(x float64) string {
	if x <= 0 {
		return "-"
	}
	return f1(x)
}

// commandsTable is the commands section of the table, or "".
func (r *results) commandsTable() string {
	if len(r.Commands) == 0 {
		return ""
	}
	var rows [][]string
	for _, x := range r.Commands {
		rows = append(rows, []string{x.System, f2(x.PerPair), f2(x.InnerPerPair), backgroundLabel(x.Background), f1(x.ExecPerPair), f3(x.KeysPerName)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### commands: Redis commands per uncontended acquire+release (MONITOR over %d pairs on one name, after a warm-up), and keys left per released name (%d names, right after the last release)\n\n",
		r.Commands[0].Pairs, r.Commands[0].Names)
	b.WriteString(mdTable([]string{"system", "commands/pair", "in scripts", "background lines meanwhile (apart)", "command time µs/pair", "keys/released name"}, rows))
	b.WriteString("\nA line counts for the pairs when a script ran it or it names the lock; the others (timers: PING, TIME, ...) are background. " +
		"Command time: as many pairs again without MONITOR, in batches of 10, INFO commandstats' usec of the commands the client sent (a script's with its inner commands; " +
		"a command's usec counts in the share of its calls MONITOR saw sent by a client, not run by a script), in the least batch: the time Redis spent executing them, " +
		"without reading, parsing and answering (wall time: a batch in which Redis was preempted mid-command counts that too). Keys: SCAN MATCH on the names, on the shared redis-server, before any fence guard passes.\n\n")
	return b.String()
}

// durabilityTable is the 2x2 table of issue 15: Baton+Redis and etcd, each in
// memory and durable, every ratio against etcd's best client style in the same
// cell (the most pairs/s; the least server CPU per pair), and Baton against its
// ceiling, redis-script on the same Redis.
func (r *results) durabilityTable() string {
	var rows [][]string
	for _, dur := range []string{durMemory, durDurable} {
		for _, c := range []int{1, 16, 64} {
			bt := r.uncD(sysBaton, dur, c)
			if bt == nil {
				continue
			}
			row := []string{dur, fmt.Sprint(c), fmt.Sprintf("%s (%s)", f0(bt.OpsPerSec), f1(bt.ServerCPU)), "-", "-", "-", "-", "-", "-"}
			loads := []string{"baton " + f1(bt.OtherLoad)}
			if x := r.uncD(sysEtcd, dur, c); x != nil {
				row[3] = fmt.Sprintf("%s (%s)", f0(x.OpsPerSec), f1(x.ServerCPU))
				loads = append(loads, "etcd "+f1(x.OtherLoad))
			}
			if x := r.uncD(sysEtcdLease, dur, c); x != nil {
				row[4] = fmt.Sprintf("%s (%s)", f0(x.OpsPerSec), f1(x.ServerCPU))
				loads = append(loads, "etcd-lease "+f1(x.OtherLoad))
			}
			ops, cpu := r.etcdBest(dur, c)
			if ops != nil && ops.OpsPerSec > 0 {
				row[5] = fmt.Sprintf("%sx (vs %s)", f2(bt.OpsPerSec/ops.OpsPerSec), ops.System)
			}
			if cpu != nil {
				row[6] = fmt.Sprintf("%s (vs %s)", f2(bt.ServerCPU/cpu.ServerCPU), cpu.System)
			}
			if x := r.uncD(sysRedisScript, dur, c); x != nil && x.OpsPerSec > 0 {
				row[7] = f1(100*bt.OpsPerSec/x.OpsPerSec) + "%"
				loads = append(loads, "redis-script "+f1(x.OtherLoad))
			}
			row[8] = strings.Join(loads, ", ")
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("### durability: Baton+Redis and etcd, each in memory and durable; ratios against etcd's best client style of the same durability\n\n")
	b.WriteString("memory: Redis without persistence, etcd's data on tmpfs; durable: Redis with appendonly yes and appendfsync always, etcd's data on disk. " +
		"Cells are pairs/s (server CPU µs per pair: Baton and its redis-server; etcd's process). Other load: each system's, in % of the machine's CPU.\n\n")
	b.WriteString(mdTable([]string{"durability", "concurrency", "baton", "etcd (4 calls)", "etcd-lease (2 calls)", "baton / best etcd pairs/s", "baton / best etcd CPU per pair", "baton / redis-script pairs/s", "other load %"}, rows))
	b.WriteString("\n")
	return b.String()
}

// loadNote says how much other processes used the machine while this ran.
func (r *results) loadNote() string {
	var by []string
	for _, sc := range []string{"uncontended", "handoff", "shared", "waiters", "expiry_handoff", "names", "cluster"} {
		if v, ok := r.Load.Scenarios[sc]; ok {
			by = append(by, fmt.Sprintf("%s %.1f%%", sc, v))
		}
	}
	return fmt.Sprintf("Other processes on the machine used %.1f%% of its CPU time during the run (%s); load average %s at the start, %s at the end.",
		r.Load.Run, strings.Join(by, ", "), r.Load.Start, r.Load.End)
}

// sharedTable is the shared section of the table, or "".
func (r *results) sharedTable() string {
	if len(r.Shared) == 0 {
		return ""
	}
	var b strings.Builder
	x0 := r.Shared[0]
	fmt.Fprintf(&b, "### shared: %d clients taking shared holds on one lock; runs of %d queued shared tickets granted by one exclusive release (median of runs)\n\n",
		x0.Clients, x0.Tickets)
	var rows [][]string
	for _, x := range r.Shared {
		rows = append(rows, []string{x.System, f0(x.OpsPerSec), f3(x.P50), f3(x.P99), f1(x.ServerCPU), f0(x.generatorCPU),
			f3(x.FirstP50), f3(x.LastP50), f3(x.LastP99), fmt.Sprint(x.Rounds)})
	}
	b.WriteString(mdTable([]string{"system", "pairs/s", "p50 ms", "p99 ms", "server CPU µs/pair", "generator CPU %",
		"run: first holds p50 ms", "run: last holds p50 ms", "run: last holds p99 ms", "rounds"}, rows))
	fmt.Fprintf(&b, "\nPairs: each client takes a shared hold on the one lock and releases it, closed loop; the holds overlap. "+
		"Run: the time from the exclusive holder's release being sent to the first, and the last, of the %d tickets holding "+
		"(baton: its long-poll answered with the lease; redis-script: its grant read from pub/sub).\n\n", x0.Tickets)
	return b.String()
}
