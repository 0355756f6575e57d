package check

import (
	"fmt"
	"strings"
	"time"
)

// UnknownHold is a hold that lived a while with no client told of it.
type UnknownHold struct {
	Lock      string
	Fence     int64
	Owner     string
	GrantedAt time.Time // on the Redis clock
	// Seen is the last reading that showed it while nobody had been told of
	// it, PTTL its remaining time then.
	Seen time.Time
	PTTL time.Duration
	// Told is when a client was first told of it (an answer reporting its
	// fence returned); zero if none ever was.
	Told time.Time
	// Life is Seen - GrantedAt, less the time Redis was out of Baton's reach
	// meanwhile: how long it was a hold nobody knew.
	Life time.Duration
	Ops  []Op // the requests that carried its owner label
}

func (u UnknownHold) String() string {
	var b strings.Builder
	told := "no client was ever told of it"
	if !u.Told.IsZero() {
		told = "a client was told of it at " + clock(u.Told)
	}
	fmt.Fprintf(&b, "hold nobody knew of on %s for %v: fence %d, owner %s, granted %s, still unknown at %s with %v left; %s",
		u.Lock, u.Life.Round(time.Millisecond), u.Fence, u.Owner, clock(u.GrantedAt), clock(u.Seen), u.PTTL, told)
	for _, op := range u.Ops {
		b.WriteString("\n  " + op.String())
	}
	return b.String()
}

// UnknownResult is what UnknownHolds found.
type UnknownResult struct {
	// Holds is how many holds the sampler saw before any client was told of
	// them: most only for the moment their grant's answer was on its way.
	Holds int
	// Max is the longest any of them lived so (Crashed aside).
	Max time.Duration
	// Over are those that lived so longer than the limit: violations.
	Over []UnknownHold
	// Crashed are those over the limit whose owner's request went to a Baton
	// process that was killed (SIGKILL) before the hold's last reading:
	// nothing was left to end them. Not counted.
	Crashed []UnknownHold
}

// UnknownHolds times the holds that no client was told of: from a hold's grant
// (its acquired time on the Redis clock) to the last reading that showed it
// before the first answer reporting its fence to a client that had not hung
// up (or, if none ever did, to the last reading that showed it), less the
// time Redis was out of Baton's reach (spans with Redis set): a hold granted
// by a copy of a script call that ran late, to a client that had gone, or to
// a ticket whose owner was not polling. Each must end, or be told of, within
// limit (the settle window); those that lived longer are Over, unless the
// Baton process that served their owner's request was killed (Crashed).
//
// Readings come every sampleEvery (50 ms): a life is measured to within that.
func UnknownHolds(ops []Op, samples []Sample, limit time.Duration, spans []Span, crashes []Crash) UnknownResult {
	var res UnknownResult
	type key struct {
		lock  string
		fence int64
	}
	told := map[key]time.Time{}
	byOwner := map[string][]Op{}
	for _, o := range ops {
		if (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK && !o.HungUp {
			k := key{o.Lock, o.Fence}
			if t, ok := told[k]; !ok || o.Return.Before(t) {
				told[k] = o.Return
			}
		}
		if o.Owner != "" && (o.Kind == Acquire || o.Kind == Poll || o.Kind == Cancel) {
			byOwner[o.Owner] = append(byOwner[o.Owner], o)
		}
	}
	type life struct {
		first, last Sample
	}
	lives := map[key]*life{}
	var order []key
	for _, s := range samples {
		if !s.Held {
			continue
		}
		k := key{s.Lock, s.Fence}
		t, isTold := told[k]
		if isTold && !s.Got.Before(t) {
			continue // a client had been told of it by then
		}
		l := lives[k]
		if l == nil {
			l = &life{first: s}
			lives[k] = l
			order = append(order, k)
		}
		l.last = s
	}
	outages := merge(spans)
	for _, k := range order {
		l := lives[k]
		res.Holds++
		from := l.first.GrantedAt
		if from.IsZero() || from.After(l.first.Sent) {
			from = l.first.Sent
		}
		u := UnknownHold{Lock: k.lock, Fence: k.fence, Owner: l.last.Owner, GrantedAt: l.first.GrantedAt,
			Seen: l.last.Sent, PTTL: l.last.PTTL, Told: told[k], Ops: byOwner[l.last.Owner],
			Life: l.last.Sent.Sub(from) - overlap(outages, from, l.last.Sent)}
		if u.Life <= limit {
			res.Max = max(res.Max, u.Life)
			continue
		}
		if killedDuring(crashes, u.Ops, u.Seen) {
			res.Crashed = append(res.Crashed, u)
			continue
		}
		res.Max = max(res.Max, u.Life)
		res.Over = append(res.Over, u)
	}
	return res
}

// killedDuring reports whether one of ops went to a Baton process that was
// killed after the op was called and no later than by.
func killedDuring(crashes []Crash, ops []Op, by time.Time) bool {
	for _, o := range ops {
		if crashed(crashes, o, by) {
			return true
		}
	}
	return false
}
