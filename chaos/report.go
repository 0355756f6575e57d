package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// printTable prints one row per scenario: the first column left-aligned, the
// figures right-aligned.
func printTable(w io.Writer, rows []row) {
	table := [][]string{{"scenario", "operations", "violations", "stale writes accepted",
		"stale writes rejected", "answered without 5xx", "orphan holds", "unknown holds", "watch lag", "idempotent retries",
		"lost answers settled", "time to recover", "Redis back to 2xx"}}
	for _, r := range rows {
		pct := 100.0
		if r.requests > 0 {
			pct = 100 * float64(r.answered) / float64(r.requests)
		}
		table = append(table, []string{r.name, strconv.Itoa(r.ops), strconv.Itoa(r.violations),
			strconv.Itoa(r.staleAccepted), strconv.Itoa(r.staleRejected),
			fmt.Sprintf("%d (%.2f%%)", r.answered, pct), orphans(r), unknownHolds(r), watchLag(r), idem(r), lostAnswers(r),
			recovery(r), redisBack(r)})
	}
	width := make([]int, len(table[0]))
	for _, line := range table {
		for i, cell := range line {
			width[i] = max(width[i], len(cell))
		}
	}
	for _, line := range table {
		var b strings.Builder
		for i, cell := range line {
			pad := strings.Repeat(" ", width[i]-len(cell))
			switch {
			case i == 0:
				b.WriteString(cell + pad)
			case i == len(line)-1:
				b.WriteString("  " + cell)
			default:
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// orphans is the holds no client was told of that outlived the ticket ttl, of
// those seen, and the longest any of those seen lasted.
func orphans(r row) string {
	o := r.orphans
	s := fmt.Sprintf("%d of %d", o.Count(), o.Unknown)
	if o.Unknown > 0 {
		s += ", max " + round(o.MaxAge)
	}
	return s
}

// unknownHolds is the longest a hold no client was told of lived, Redis's
// outages aside, of how many such holds were seen, and how many lived longer
// than the settle window (violations).
func unknownHolds(r row) string {
	u := r.unknown
	s := fmt.Sprintf("max %s of %d, %d over", round(u.Max), u.Holds, len(u.Over))
	if n := len(u.Crashed); n > 0 {
		s += fmt.Sprintf(" (%d after a kill)", n)
	}
	return s
}

// lostAnswers is, of the acquires with an Idempotency-Key whose answer was
// lost while Redis was up, the share a later try settled (goal 100%); then
// the same for those lost while Redis was down or failing over, and the
// acquires without a key whose answer was lost while Redis was up (no retry
// can settle those).
func lostAnswers(r row) string {
	l := r.lost
	up := "-"
	if l.Up > 0 {
		up = fmt.Sprintf("%d of %d (%.0f%%)", l.UpSettled, l.Up, l.Share())
	}
	return fmt.Sprintf("up %s; down %d of %d; plain %d up, %d down", up, l.DownSettled, l.Down, l.Plain, l.PlainDown)
}

// watchLag is the p99 and worst lag of the watches judged, and how many were
// late.
func watchLag(r row) string {
	w := r.watches
	if w.Judged == 0 {
		return "-"
	}
	return fmt.Sprintf("p99 %s, max %s, %d late of %d", round(w.Quantile(0.99)), round(w.Quantile(1)), len(w.Late), w.Judged)
}

// idem is the acquires with an Idempotency-Key, how many were sent again after
// a lost answer, how many keys with a lost answer a later try settled, the
// answers marked replayed, and the keys that made a second
// hold (violations), with those the contract allows (Redis lost the key).
func idem(r row) string {
	i := r.idem
	s := fmt.Sprintf("%d keys, %d retried, %d of %d lost answers resolved, %d replayed, %d wrong", i.Keys, i.Retried, i.Resolved, i.Lost, i.Replays, len(i.Wrong))
	if i.Excused > 0 {
		s += fmt.Sprintf(" (%d second holds after data loss)", i.Excused)
	}
	if i.Fresh > 0 {
		s += fmt.Sprintf(" (%d fresh holds after one nobody knew of had ended)", i.Fresh)
	}
	return s
}

// recovery is the median and worst time from a fault's end (the killed process
// started again) to a working handoff between the Baton processes, both ways,
// over the scenario's faults.
func recovery(r row) string {
	if r.faults == 0 {
		return "-"
	}
	if len(r.recovery) == 0 {
		return "never (" + strconv.Itoa(r.faults) + " faults)"
	}
	d := slices.Clone(r.recovery)
	slices.Sort(d)
	s := fmt.Sprintf("p50 %s, max %s (%d faults)", round(d[len(d)/2]), round(d[len(d)-1]), r.faults)
	if n := r.faults - len(d); n > 0 {
		s += fmt.Sprintf(", %d never", n)
	}
	return s
}

// redisBack is, over a scenario's Redis kills, the time from the restarted
// Redis answering PING to each Baton process's first 2xx: p50, p99, max (goal:
// p99 at most redisBackGoal).
func redisBack(r row) string {
	d := r.redisBack
	if len(d) == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (%d)", round(quantile(d, 0.5)), round(quantile(d, 0.99)), round(quantile(d, 1)), len(d))
}

func round(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
