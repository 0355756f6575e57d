package main

import (
	"fmt"
	"strings"
)

// The budgets of the lean core: what an acquire+release costs, each figure a
// ratio to a floor measured in the same run, judged against its goal for the
// Baton under test, and given for baton-ref (-ref) beside it when it ran.

// budget is one figure: its value for baton and baton-ref, the goal, and
// whether baton meets it.
type budget struct {
	Figure    string `json:"figure"`
	Goal      string `json:"goal"`
	Baton     string `json:"baton"`
	Reference string `json:"baton_ref,omitempty"`
	Status    string `json:"status"` // PASS, MISS, or "not measured"
}

// budgetDef is how one figure is taken: value is the figure of a Baton
// (sysBaton or sysBatonRef) and what it is made of, ok false when a row it
// needs was not measured; pass judges the figure.
type budgetDef struct {
	figure, goal string
	value        func(r *results, sys string) (x float64, detail string, ok bool)
	pass         func(x float64) bool
}

// budgetConcurrency is the concurrency of the uncontended rows the ratios use.
const budgetConcurrency = 16

var budgetDefs = []budgetDef{
	{"Redis commands per uncontended exclusive acquire+release (MONITOR, script-inner included)", "<= 8",
		func(r *results, sys string) (float64, string, bool) {
			b, f := r.cmds(sys), r.cmds(sysFloor)
			if b == nil {
				return 0, "", false
			}
			d := fmt.Sprintf("%.2f (%.2f in scripts", b.PerPair, b.InnerPerPair)
			if f != nil {
				d += fmt.Sprintf("; floor %.2f", f.PerPair)
			}
			return b.PerPair, d + ")", true
		}, func(x float64) bool { return x <= 8 }},
	{"keys left per released name (before the fence guard passes)", "<= 1 (the fence guard)",
		func(r *results, sys string) (float64, string, bool) {
			b := r.cmds(sys)
			if b == nil {
				return 0, "", false
			}
			return b.KeysPerName, fmt.Sprintf("%.3f (%d names)", b.KeysPerName, b.Names), true
		}, func(x float64) bool { return x <= 1 }},
	{fmt.Sprintf("Redis CPU per pair vs floor (SET NX PX + compare-and-delete, same Redis): redis-server's CPU (INFO used_cpu), c=%d", budgetConcurrency), "<= 3x",
		uncRatio(sysFloor, "µs", func(x *uncontendedRow) float64 { return x.RedisCPU }), func(x float64) bool { return x <= 3 }},
	{"the same, in command time (INFO commandstats, pairs on one name: the commands sent, scripts with their inner ones)", "<= 3x",
		func(r *results, sys string) (float64, string, bool) {
			b, f := r.cmds(sys), r.cmds(sysFloor)
			if b == nil || f == nil || f.ExecPerPair <= 0 {
				return 0, "", false
			}
			x := b.ExecPerPair / f.ExecPerPair
			return x, fmt.Sprintf("%.2fx (%.1f vs floor %.1f µs)", x, b.ExecPerPair, f.ExecPerPair), true
		}, func(x float64) bool { return x <= 3 }},
	{"Baton process CPU per pair vs hello (two requests to a minimal net/http server)", "<= 1.5x",
		uncRatio(sysHello, "µs", func(x *uncontendedRow) float64 { return x.ProcessCPU }), func(x float64) bool { return x <= 1.5 }},
	{fmt.Sprintf("uncontended c=%d memory: Baton / etcd-lease pairs/s", budgetConcurrency), ">= 3x",
		uncRatio(sysEtcdLease, "pairs/s", func(x *uncontendedRow) float64 { return x.OpsPerSec }), func(x float64) bool { return x >= 3 }},
	{fmt.Sprintf("server CPU per pair, c=%d memory: Baton+Redis / etcd-lease", budgetConcurrency), "<= 0.25",
		uncRatio(sysEtcdLease, "µs", func(x *uncontendedRow) float64 { return x.ServerCPU }), func(x float64) bool { return x <= 0.25 }},
	{"handoff p50, 16 waiters: Baton / redis-script (the no-HTTP floor)", "<= 2x",
		handRatio(func(r *results, sys string) (*handoffRow, *handoffRow) {
			return r.hand(sys, 16), r.hand(sysRedisScript, 16)
		}),
		func(x float64) bool { return x <= 2 }},
	{"handoff p50, 16 waiters: etcd / Baton", ">= 3x",
		handRatio(func(r *results, sys string) (*handoffRow, *handoffRow) { return r.hand(sysEtcd, 16), r.hand(sys, 16) }),
		func(x float64) bool { return x >= 3 }},
}

// uncRatio is the figure f of a Baton's uncontended row over floor's, both at
// budgetConcurrency in the memory cell.
func uncRatio(floor, unit string, f func(*uncontendedRow) float64) func(*results, string) (float64, string, bool) {
	return func(r *results, sys string) (float64, string, bool) {
		b, d := r.uncD(sys, durMemory, budgetConcurrency), r.uncD(floor, durMemory, budgetConcurrency)
		if b == nil || d == nil || f(b) <= 0 || f(d) <= 0 {
			return 0, "", false
		}
		x := f(b) / f(d)
		return x, fmt.Sprintf("%.2fx (%.1f vs %s %.1f %s)", x, f(b), floor, f(d), unit), true
	}
}

// handRatio is the p50 of one handoff row over another's.
func handRatio(rows func(*results, string) (num, den *handoffRow)) func(*results, string) (float64, string, bool) {
	return func(r *results, sys string) (float64, string, bool) {
		n, d := rows(r, sys)
		if n == nil || d == nil || d.P50 <= 0 {
			return 0, "", false
		}
		x := n.P50 / d.P50
		return x, fmt.Sprintf("%.2fx (%s %.3f vs %s %.3f ms)", x, n.System, n.P50, d.System, d.P50), true
	}
}

// evaluateBudgets takes every budget figure of this run.
func evaluateBudgets(r *results) []budget {
	var bs []budget
	for _, d := range budgetDefs {
		b := budget{Figure: d.figure, Goal: d.goal, Status: notMeasured}
		if x, detail, ok := d.value(r, sysBaton); ok {
			b.Baton, b.Status = detail, status(d.pass(x))
		}
		if _, detail, ok := d.value(r, sysBatonRef); ok {
			b.Reference = detail
		}
		bs = append(bs, b)
	}
	return bs
}

func (r *results) cmds(sys string) *commandsRow {
	for i := range r.Commands {
		if x := &r.Commands[i]; x.System == sys {
			return x
		}
	}
	return nil
}

// budgetTable is the budgets as a table, with the other load of the rows the
// ratios use, or "" when none was measured.
func (r *results) budgetTable() string {
	if len(r.Budgets) == 0 {
		return ""
	}
	ref := r.Setup.Reference != ""
	head := []string{"", "figure", "goal", "baton"}
	if ref {
		head = append(head, "baton-ref")
	}
	var rows [][]string
	for _, b := range r.Budgets {
		row := []string{b.Status, b.Figure, b.Goal, b.Baton}
		if ref {
			row = append(row, b.Reference)
		}
		rows = append(rows, row)
	}
	var b strings.Builder
	b.WriteString("### budgets: the cost of an acquire+release against the floors, measured in this run (status: baton's)\n\n")
	b.WriteString(mdTable(head, rows))
	var loads []string
	for _, sys := range []string{sysBaton, sysBatonRef, sysHello, sysFloor, sysEtcdLease} {
		if x := r.uncD(sys, durMemory, budgetConcurrency); x != nil {
			loads = append(loads, fmt.Sprintf("%s %.1f%%", sys, x.OtherLoad))
		}
	}
	if len(loads) > 0 {
		fmt.Fprintf(&b, "\nOther processes' share of the machine's CPU during the c=%d rows: %s.\n", budgetConcurrency, strings.Join(loads, ", "))
	}
	if r.Setup.Reference != "" {
		b.WriteString("baton-ref: " + r.Setup.Reference + ".\n")
	}
	b.WriteString("\n")
	return b.String()
}
