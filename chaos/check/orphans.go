package check

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Sample is one reading of a hold in Redis (the runner's sampler): who held the
// lock at some moment between Sent and Got. A reading of a lock with several
// (shared) holds is a Sample per hold, the one with the highest fence (the
// lock's state shows it) marked Top; a reading of a free lock is one Sample,
// not Held.
type Sample struct {
	Lock      string
	Sent, Got time.Time
	Held      bool
	Top       bool // the hold with the lock's highest fence in this reading
	Shared    bool
	Fence     int64
	Owner     string        // the owner label of the request the hold was granted to
	GrantedAt time.Time     // the hold's grant time, on the Redis clock (ms)
	PTTL      time.Duration // the hold's remaining time then
}

// Span is a stretch of time a fault disturbed the service: from the fault's
// start until the service was seen working again after it. Redis marks spans in
// which Baton could not use Redis at all (killed, frozen, out of reach, failing
// over): nothing can be undone then. The others (pub/sub connections killed,
// latency, a Baton process restarting) only excuse a late watch.
type Span struct {
	From, To time.Time
	Redis    bool
	// Server, when not 0, is 1 + the index of the one Baton process the fault
	// concerned (a process killed): it excuses only that process's watches.
	Server int
	What   string
}

// Crash is a Baton process killed with SIGKILL: what it had yet to undo is lost
// with it.
type Crash struct {
	Server int
	At     time.Time
}

// UndoGrace is what an orphan's age may exceed the limit by before it counts:
// the time Baton takes to notice that a client has gone and run the undo, on a
// loaded machine, and the clocks' reading error (Slack).
const UndoGrace = 100 * time.Millisecond

// Orphan is a hold that no client was told of, kept longer than the limit.
type Orphan struct {
	Lock      string
	Fence     int64
	Owner     string
	GrantedAt time.Time
	// Since is when the limit started to run: the later of the grant and the end
	// of the last request of its owner label (the client going away).
	Since time.Time
	// Seen is the last reading that showed the hold, PTTL its remaining time then.
	Seen time.Time
	PTTL time.Duration
	// Age is Seen - Since, less the time Redis was out of Baton's reach meanwhile.
	Age time.Duration
	// Ops are the requests that carried its owner label.
	Ops []Op
}

func (o Orphan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "orphan hold on %s: fence %d, owner %s, granted %s, its client gone since %s, still held at %s "+
		"with %v left: %v of service time, over the limit", o.Lock, o.Fence, o.Owner, clock(o.GrantedAt),
		clock(o.Since), clock(o.Seen), o.PTTL, o.Age.Round(time.Millisecond))
	for _, op := range o.Ops {
		b.WriteString("\n  " + op.String())
	}
	return b.String()
}

// OrphanResult is what Orphans found.
type OrphanResult struct {
	// Unknown is the number of holds seen that no client was told of (grants to
	// requests given up on or without a definite answer, tickets whose owner
	// was not polling), each judged.
	Unknown int
	// MaxAge is the longest any of them lasted, as Orphan.Age (crashes aside).
	MaxAge time.Duration
	// Orphans are those kept longer than the limit.
	Orphans []Orphan
	// Crashed are those kept longer than the limit after the Baton process that
	// served their owner's last request was killed (SIGKILL) within the limit
	// of it: nothing was left to undo them. Not counted as orphans.
	Crashed []Orphan
	// Answered are the requests whose client had hung up that Baton answered
	// with a grant anyway. The runner saw the answer and let the hold go; a
	// client that had closed its connection would not have.
	Answered int
	// GrantedGone are those of them granted more than UndoGrace after the hang-up
	// (the runner's stalls aside): Baton made a grant for a client it should by
	// then have known was gone, and answered it. Each is an orphan, had the
	// client closed its connection.
	GrantedGone []Op
}

// Count is the number of orphans: holds kept too long, and grants answered to
// clients long gone.
func (r OrphanResult) Count() int { return len(r.Orphans) + len(r.GrantedGone) }

// Orphans finds the holds in samples that no client was told of and judges how
// long each lasted. A hold is known from the return of the first answer that
// reported its fence (an Acquire or Poll answered OK); before that, and for
// good if no answer ever did, nobody can renew or release it but Baton. Such a
// hold may last at most limit (the ticket ttl: a grant kept for a ticket's owner
// who is not polling lasts that long by design) after the later of its grant and
// the end of its owner's last request (the moment its client went away), not
// counting time in a Redis span, plus UndoGrace. Readings taken while a request
// of its owner was in flight are not judged: that request may still answer
// with it.
//
// Requests whose client hung up end, for this, at the hang-up; one that Baton
// nevertheless answered with a grant made more than UndoGrace after it (stalls,
// the time the runner itself had no CPU, aside) is an orphan too (GrantedGone).
func Orphans(ops []Op, samples []Sample, limit time.Duration, spans, stalls []Span, crashes []Crash) OrphanResult {
	var res OrphanResult
	stalls = union(stalls, func(Span) bool { return true })
	for _, o := range ops {
		if o.HungUp && o.Outcome == OK && (o.Kind == Acquire || o.Kind == Poll) {
			res.Answered++
			if late := o.AcquiredAt.Sub(o.HungAt); late > UndoGrace && late-overlap(stalls, o.HungAt, o.AcquiredAt) > UndoGrace {
				res.GrantedGone = append(res.GrantedGone, o)
			}
		}
	}
	type key struct {
		lock  string
		fence int64
	}
	knownAt := map[key]time.Time{}
	byOwner := map[string][]Op{}
	for _, o := range ops {
		if (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK {
			k := key{o.Lock, o.Fence}
			if t, ok := knownAt[k]; !ok || o.Return.Before(t) {
				knownAt[k] = o.Return
			}
		}
		if o.Owner != "" && (o.Kind == Acquire || o.Kind == Poll || o.Kind == Cancel) {
			byOwner[o.Owner] = append(byOwner[o.Owner], o)
		}
	}
	holds := map[key][]Sample{}
	var order []key
	for _, s := range samples {
		if !s.Held {
			continue
		}
		k := key{s.Lock, s.Fence}
		if _, ok := holds[k]; !ok {
			order = append(order, k)
		}
		holds[k] = append(holds[k], s)
	}
	outages := merge(spans)
	for _, k := range order {
		ss := holds[k]
		known, isKnown := knownAt[k]
		owned := byOwner[ss[0].Owner]
		var worst *Orphan
		var worstLast *Op
		for _, s := range ss {
			if isKnown && !s.Got.Before(known) {
				break // a client was told of it by then
			}
			last, inFlight := lastContact(owned, s)
			if inFlight {
				continue
			}
			since := s.GrantedAt
			if last != nil {
				since = maxTime(since, end(*last))
			}
			age := s.Sent.Sub(since) - overlap(outages, since, s.Sent)
			if worst == nil || age > worst.Age {
				worst = &Orphan{Lock: k.lock, Fence: k.fence, Owner: s.Owner, GrantedAt: s.GrantedAt,
					Since: since, Seen: s.Sent, PTTL: s.PTTL, Age: age, Ops: owned}
				worstLast = last
			}
		}
		if worst == nil {
			continue // always known, or always asked for
		}
		res.Unknown++
		switch {
		case worst.Age <= limit+UndoGrace:
			res.MaxAge = max(res.MaxAge, worst.Age)
		case worstLast != nil && crashed(crashes, *worstLast, worst.Since.Add(limit+UndoGrace)):
			res.Crashed = append(res.Crashed, *worst)
		default:
			res.MaxAge = max(res.MaxAge, worst.Age)
			res.Orphans = append(res.Orphans, *worst)
		}
	}
	return res
}

// lastContact returns, of a hold's owner's requests, the last one that had
// ended before the reading s, and whether one may have been in flight at the
// reading's moment (somewhere between s.Sent and s.Got).
func lastContact(owned []Op, s Sample) (last *Op, inFlight bool) {
	for i := range owned {
		o := &owned[i]
		switch {
		case !o.Call.After(s.Got) && !end(*o).Before(s.Sent):
			return nil, true
		case end(*o).Before(s.Sent) && (last == nil || end(*o).After(end(*last))):
			last = o
		}
	}
	return last, false
}

// end is when a request stopped being able to tell its client anything: its
// return, or its hang-up.
func end(o Op) time.Time {
	if o.HungUp {
		return o.HungAt
	}
	return o.Return
}

// crashed reports whether the Baton process that served o was killed after o
// was called and no later than by.
func crashed(crashes []Crash, o Op, by time.Time) bool {
	for _, c := range crashes {
		if c.Server == o.Server && !c.At.Before(o.Call) && !c.At.After(by) {
			return true
		}
	}
	return false
}

// merge returns the Redis spans, sorted and with overlapping ones joined.
func merge(spans []Span) []Span {
	return union(spans, func(s Span) bool { return s.Redis })
}

// union returns the spans keep keeps, sorted and with overlapping ones joined.
func union(spans []Span, keep func(Span) bool) []Span {
	var rs []Span
	for _, s := range spans {
		if keep(s) && s.To.After(s.From) {
			rs = append(rs, s)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].From.Before(rs[j].From) })
	var out []Span
	for _, s := range rs {
		if n := len(out); n > 0 && !s.From.After(out[n-1].To) {
			out[n-1].To = maxTime(out[n-1].To, s.To)
			continue
		}
		out = append(out, s)
	}
	return out
}

// overlap is how much of [from, to] spans cover; they must not overlap each
// other (union).
func overlap(spans []Span, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		a, b := maxTime(from, s.From), minTime(to, s.To)
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}
