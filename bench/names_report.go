package main

import (
	"fmt"
	"math"
	"strings"
)

// fenceKeyBefore is what a distinct name cost Redis before the fence guard: a 175-byte
// fence key, kept 7 days. The goal during the guard is to cost no more.
const fenceKeyBefore = 175

// namesZero is how far from 0 the bytes per name left after the guard may be and
// still count as none (rounded, 0 B): Redis's own bookkeeping moves used_memory
// by a few KB either way between two idle moments, well below 0.5 B per name
// from 10k names on.
const namesZero = 0.5

// namesGoals judges the names goals: after the guard a name leaves no key and no
// byte; during it, a name costs at most what its fence key cost before.
func namesGoals(r *results) []goal {
	var gs []goal
	for _, sys := range []string{sysBaton, sysRedisScript, sysRedislock} {
		var after, during []string
		okAfter, okDuring, inGuard := true, true, false
		for _, x := range r.Names {
			if x.System != sys {
				continue
			}
			after = append(after, fmt.Sprintf("%s: %d keys, %+.1f B/name", countLabel(x.Names), x.KeysGuard, x.NameGuard))
			okAfter = okAfter && x.KeysGuard == 0 && math.Abs(x.NameGuard) < namesZero
			if x.KeysReleased > 0 {
				inGuard = true
				during = append(during, fmt.Sprintf("%s: %.1f B (%d keys)", countLabel(x.Names), x.InGuard, x.KeysReleased))
				okDuring = okDuring && x.InGuard <= fenceKeyBefore
			} else {
				during = append(during, fmt.Sprintf("%s: no key left", countLabel(x.Names)))
			}
		}
		g := goal{Goal: fmt.Sprintf("names: %s leaves 0 keys and 0 B per name after the guard", sys), Status: notMeasured}
		if len(after) > 0 {
			g.Got, g.Status = strings.Join(after, "; "), status(okAfter)
		}
		gs = append(gs, g)
		if sys == sysRedislock && !inGuard {
			continue // it deletes its key on release: nothing to judge during a guard
		}
		g = goal{Goal: fmt.Sprintf("names: %s <= %d B per name during the guard", sys, fenceKeyBefore), Status: notMeasured}
		if len(during) > 0 {
			g.Got, g.Status = strings.Join(during, "; "), status(okDuring)
		}
		gs = append(gs, g)
	}
	return gs
}

// namesTable is the names section of the table, or "".
func (r *results) namesTable() string {
	if len(r.Names) == 0 {
		return ""
	}
	var b strings.Builder
	guard := fmt.Sprintf("%.0f s", float64(r.Names[0].GuardMs)/1000)
	fmt.Fprintf(&b, "### names: N distinct names (`order:00000000` ...) each acquired and released once (%d clients; fence guard %s, leases as long; one run each)\n\n",
		r.Names[0].Clients, guard)
	var rows [][]string
	for _, x := range r.Names {
		inGuard := "-"
		if x.KeysReleased > 0 {
			inGuard = f1(x.InGuard)
		}
		gone := fmt.Sprintf("%.2f s", x.GoneMs/1000)
		if x.Scanned {
			gone += " (SCAN)"
		}
		rows = append(rows, []string{x.System, countLabel(x.Names), f0(x.PairsPerSec),
			fmt.Sprint(x.KeysReleased), fmt.Sprint(x.BytesReleased), f1(x.NameReleased), inGuard,
			fmt.Sprint(x.KeysGuard), fmt.Sprintf("%+d", x.BytesGuard), fmt.Sprintf("%+.1f", x.NameGuard), gone})
	}
	b.WriteString(mdTable([]string{"system", "names", "pairs/s", "keys after release", "B after release", "B/name", "B/name in guard",
		"keys after guard", "B after guard", "B/name after guard", "keys gone after release"}, rows))
	fmt.Fprintf(&b, "\nRight after the last release, and again once the guard (%s) has passed and DBSIZE is back at the baseline: keys (DBSIZE) "+
		"and bytes beyond a baseline taken on the same Redis just before the run, after a warm-up and once the figures held still. "+
		"Bytes are INFO used_memory less what the connected clients use (the sum of CLIENT LIST tot-mem: query and reply buffers, "+
		"which grow with traffic and shrink after 2 s idle, whatever the names; results.json has used_memory's own difference too). "+
		"B/name divides by N; B/name in guard by the keys still counted, which is what a name costs while its fence key lives "+
		"(names granted more than the guard before the last release are gone already). used_memory is Redis's count of what it "+
		"allocated, in jemalloc's size classes, including the hash tables of the keyspace and of expiries (powers of two, so the "+
		"cost per key moves in steps with the number of keys, more so while a table is rehashed into one twice its size); it is "+
		"not RSS, so neither fragmentation nor memory jemalloc keeps after keys are freed shows here. Expired keys count until "+
		"Redis reclaims them (on access, or by its active expiry, about 10 times a second): 'keys gone after release' is when "+
		"DBSIZE was back at the baseline; '(SCAN)' marks a run where it was not by guard + 30 s and a SCAN of the keyspace expired "+
		"the rest. (A design that kept a fence key per name for 7 days would leave %d bytes per name.)\n\n", guard, fenceKeyBefore)
	return b.String()
}

// countLabel writes 10000 as 10k and 1000000 as 1M.
func countLabel(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
