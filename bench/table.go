package main

import (
	"fmt"
	"strings"
)

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
	if len(r.Uncontended) > 0 {
		b.WriteString("### uncontended: acquire + release of distinct names (" + r.Setup.Loop + "; median of runs)\n\n")
		var rows [][]string
		for _, x := range r.Uncontended {
			rows = append(rows, []string{x.System, fmt.Sprint(x.Concurrency), f0(x.OpsPerSec), f3(x.P50), f3(x.P99), f1(x.ServerCPU), f0(x.generatorCPU)})
		}
		b.WriteString(mdTable([]string{"system", "concurrency", "pairs/s", "p50 ms", "p99 ms", "server CPU µs/pair", "generator CPU %"}, rows))
		b.WriteString("\nGenerator CPU is this process's, in % of one CPU: near 100% the figure is bounded by the load generator, not the server.\n\n")
		var rr [][]string
		for _, c := range []int{1, 16, 64} {
			bt, et, st := r.unc(sysBaton, c), r.unc(sysEtcd, c), r.unc(sysRedisScript, c)
			if bt == nil {
				continue
			}
			row := []string{fmt.Sprint(c), "-", "-", "-"}
			if et != nil && et.OpsPerSec > 0 {
				row[1] = f2(bt.OpsPerSec/et.OpsPerSec) + "x"
			}
			if st != nil && st.OpsPerSec > 0 {
				row[2] = f1(100*bt.OpsPerSec/st.OpsPerSec) + "%"
			}
			if et != nil && et.ServerCPU > 0 {
				row[3] = f2(bt.ServerCPU / et.ServerCPU)
			}
			rr = append(rr, row)
		}
		if len(rr) > 0 {
			b.WriteString(mdTable([]string{"concurrency", "baton/etcd throughput", "baton/redis-script throughput", "baton/etcd server CPU per pair"}, rr))
			b.WriteString("\n")
		}
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
			rows = append(rows, []string{fmt.Sprint(x.Waiters), f0(x.RSSPerWaiter), fmt.Sprintf("%.0f -> %.0f", float64(x.rssBefore)/(1<<20), float64(x.rssWith)/(1<<20)),
				fmt.Sprint(x.RedisConns), fmt.Sprint(x.PubSubConns), f2(x.IdleCPU)})
		}
		b.WriteString(mdTable([]string{"waiters", "RSS B/waiter", "RSS MiB", "redis connections", "pub/sub", "idle CPU %"}, rows))
		if r.waitersBound != "" {
			b.WriteString("\nThe " + r.waitersBound + ".\n")
		}
		b.WriteString("\n")
	}
	if len(r.Expiry) > 0 {
		b.WriteString("### expiry_handoff: holder's lease end -> next grant (median of runs)\n\n")
		var rows [][]string
		for _, x := range r.Expiry {
			rows = append(rows, []string{x.System, fmt.Sprint(x.reps), f1(x.P50), f1(x.P99)})
		}
		b.WriteString(mdTable([]string{"system", "repetitions", "p50 ms", "p99 ms"}, rows))
		b.WriteString("\n")
	}
	b.WriteString(r.namesTable())
	b.WriteString(r.loadNote() + "\n\n")
	issues := "issue 4; names: issue 16"
	if len(authGoals(r)) > 0 {
		issues += "; access control: issue 9"
	}
	b.WriteString("### goals (" + issues + ")\n\n")
	var rows [][]string
	for _, g := range r.Goals {
		rows = append(rows, []string{g.Status, g.Goal, g.Got})
	}
	b.WriteString(mdTable([]string{"", "goal", "measured"}, rows))
	return b.String()
}

// loadNote says how much other processes used the machine while this ran.
func (r *results) loadNote() string {
	var by []string
	for _, sc := range []string{"uncontended", "handoff", "shared", "waiters", "expiry_handoff", "names"} {
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
