package check

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// WatchBound is how soon the contract wants a watch to return after the lock
// it watches stops being held with the watched fence: released, expired, or
// handed on.
const WatchBound = 50 * time.Millisecond

// Late is a watch that returned later than allowed after the change it waited for.
type Late struct {
	Watch  Op
	Change time.Time // the latest moment the change can have happened
	Why    string    // what shows the change
	Lag    time.Duration
	// Stalled is how long the runner was left without a CPU meanwhile.
	Stalled time.Duration
}

func (l Late) String() string {
	return fmt.Sprintf("watch returned %v after the lock stopped being held with fence %d (%s, by %s; the runner stalled %v meanwhile): %s",
		l.Lag.Round(time.Millisecond), l.Watch.Fence, l.Why, clock(l.Change), l.Stalled.Round(time.Millisecond), l.Watch)
}

// WatchResult is what Watches found.
type WatchResult struct {
	Judged  int             // watches in flight at (or called after) a change of their lock
	Lags    []time.Duration // their lags as measured, sorted
	Late    []Late          // those later than the bound, stalls aside
	Stalled int             // those later than the bound only by the time the runner stalled
	Excused int             // watches whose change fell in a span (a fault)
	Errors  int             // watches answered with an error (not judged)
}

// Quantile is the q-quantile of the lags (0 when none).
func (r WatchResult) Quantile(q float64) time.Duration {
	if len(r.Lags) == 0 {
		return 0
	}
	return r.Lags[min(len(r.Lags)-1, int(q*float64(len(r.Lags))))]
}

// Watches checks that every watch returned within bound of the moment its lock
// stopped being held with the fence it watched (or of its call, when that came
// first).
//
// The moment of the change is taken as the earliest of these upper bounds, each
// a time by which the lock was certainly no longer held with fence F as its
// highest (a watch returns on any change of the holds):
//   - the return of a release of F that freed the lock (count 0);
//   - the grant time (acquired_at, Redis clock, + 1 ms) of any later fence,
//     but for a shared hold granted before the watch was called beside F's
//     (unless F's is known to be exclusive): that one may have ended by then,
//     and F be the highest again;
//   - the end of F's lease (its latest expires_at + 1 ms), when every renewal
//     and re-entry of the lease has a known outcome;
//   - the first sampler reading (its Got) taken after the watch's call that
//     shows the lock free or held with another fence: this covers changes no
//     answer reported (holds undone by Baton, unclaimed grants running out).
//
// Since each is at or after the true change, the lag measured (return minus
// change) is at most the true lag: a late watch is late for certain, up to the
// clocks' reading error, which bound must allow for (Slack, and the recorder's
// own scheduling on a loaded machine). A watch whose change (or the bound
// after it) falls in a span is excused: the fault may have held up the
// notification. A watch late by no more than the time the runner stalled
// (stalls: it had no CPU) between the change and the return is counted apart,
// not as late: its return was recorded late, and the machine that starved the
// runner starved Baton too.
func Watches(ops []Op, samples []Sample, bound time.Duration, spans, stalls []Span) WatchResult {
	var res WatchResult
	stalls = union(stalls, func(Span) bool { return true })
	byLock := map[string][]Op{}
	var watches []Op
	for _, o := range ops {
		switch {
		case o.Kind == Watch && o.Outcome == OK:
			watches = append(watches, o)
		case o.Kind == Watch:
			res.Errors++
		case o.Kind != Loss:
			byLock[o.Lock] = append(byLock[o.Lock], o)
		}
	}
	readings := map[string][]Sample{}
	modes := map[lockFence]bool{} // the holds read, by lock and fence: shared or not
	for _, s := range samples {
		if s.Held {
			modes[lockFence{s.Lock, s.Fence}] = s.Shared
		}
		if !s.Held || s.Top { // the lock as its state shows it: its highest fence
			readings[s.Lock] = append(readings[s.Lock], s)
		}
	}
	for _, ss := range readings {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Sent.Before(ss[j].Sent) })
	}
	for _, w := range watches {
		shared, read := modes[lockFence{w.Lock, w.Fence}]
		change, why := changeOf(byLock[w.Lock], readings[w.Lock], w, read && !shared)
		if change.IsZero() || change.After(w.Return) {
			continue // the lock did not change while it waited: it ran its wait out
		}
		start := maxTime(change, w.Call)
		if disturbed(spans, w.Server, start, start.Add(bound)) {
			res.Excused++
			continue
		}
		lag := max(w.Return.Sub(start), 0)
		res.Judged++
		res.Lags = append(res.Lags, lag)
		switch {
		case lag <= bound:
		case lag-overlap(stalls, start, w.Return) <= bound:
			res.Stalled++
		default:
			res.Late = append(res.Late, Late{Watch: w, Change: change, Why: why, Lag: lag,
				Stalled: overlap(stalls, start, w.Return)})
		}
	}
	slices.Sort(res.Lags)
	return res
}

// lockFence names a hold.
type lockFence struct {
	lock  string
	fence int64
}

// changeOf is the earliest upper bound on the moment w's lock stopped being held
// with w.Fence, and what shows it; zero when nothing does. exclusive: the
// sampler read F's hold as an exclusive one.
func changeOf(ops []Op, readings []Sample, w Op, exclusive bool) (time.Time, string) {
	var at time.Time
	var why string
	consider := func(t time.Time, what string) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at, why = t, what
		}
	}
	f := w.Fence
	// F's hold may be known to be exclusive by an answer too (a hold nobody
	// was told of is known by readings only).
	for _, o := range ops {
		if (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK && o.Fence == f {
			exclusive = !o.Shared
		}
	}
	var lease string
	for _, o := range ops {
		switch {
		case o.Kind == Release && o.Outcome == OK && o.Released && o.Fence == f:
			consider(o.Return, "released")
		case (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK && o.Fence > f:
			t := o.Return
			if !o.AcquiredAt.IsZero() {
				t = minTime(t, o.AcquiredAt.Add(time.Millisecond))
			}
			if !exclusive && o.Shared && t.Before(w.Call) {
				// A shared hold granted beside F's before the watch: it may have
				// ended by the call, and F be the lock's highest fence again.
				continue
			}
			consider(t, fmt.Sprintf("fence %d granted", o.Fence))
		case (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK && o.Fence == f:
			lease = o.Lease
		}
	}
	if end := leaseEnd(ops, lease); !end.IsZero() {
		consider(end.Add(time.Millisecond), "its lease ran out")
	}
	i := sort.Search(len(readings), func(i int) bool { return !readings[i].Sent.Before(w.Call) })
	for _, s := range readings[i:] {
		if !s.Held || s.Fence != f {
			what := "the sampler saw it free"
			if s.Held {
				what = fmt.Sprintf("the sampler saw fence %d", s.Fence)
			}
			consider(s.Got, what)
			break
		}
	}
	return at, why
}

// leaseEnd is when the lease ran out at the latest, by its answers; zero when
// unknown (no lease, or a renewal or re-entry of unknown outcome).
func leaseEnd(ops []Op, lease string) time.Time {
	if lease == "" {
		return time.Time{}
	}
	var end time.Time
	for _, o := range ops {
		if o.Lease != lease {
			continue
		}
		switch {
		case (o.Kind == Renew || o.Kind == Reenter) && o.Outcome == Unknown:
			return time.Time{}
		case o.Outcome == OK && o.Kind != Release:
			end = maxTime(end, o.ExpiresAt)
		}
	}
	return end
}

// disturbed reports whether any span that concerned Baton process server
// overlaps [from, to].
func disturbed(spans []Span, server int, from, to time.Time) bool {
	for _, s := range spans {
		if (s.Server == 0 || s.Server == server+1) && !s.From.After(to) && !s.To.Before(from) {
			return true
		}
	}
	return false
}
