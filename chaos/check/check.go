package check

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the outcome of checking one history.
type Result struct {
	Locks        int         // lock histories checked
	Checked      int         // operations given to porcupine (the others cannot be wrong)
	Violations   []Violation // lock histories that are not linearizable
	Inconclusive []string    // locks whose check ran out of time
}

// Violation is one lock history that no legal order explains.
type Violation struct {
	Lock string
	// Excerpt is the end of the longest order porcupine could build, the state it
	// reached, and the operations it could not put next.
	Excerpt []string
	// HTML is porcupine's visualization of the history, when it could be written.
	HTML string
}

func (v Violation) String() string {
	s := "lock " + v.Lock + ": no legal order\n  " + strings.Join(v.Excerpt, "\n  ")
	if v.HTML != "" {
		s += "\n  visualization: " + v.HTML
	}
	return s
}

// GrantWindow is when the grant an OK Acquire or Poll reports can have happened.
// An Acquire's grant happened during the request. A ticket's can have happened at
// any moment since the ticket was asked for (a release or an expiry hands the lock
// on while the waiter is not looking); its acquired_at, on the Redis clock,
// narrows that to a moment, within Slack. A retried Acquire's (same
// Idempotency-Key) can have happened since its first try.
func GrantWindow(o Op) (from, to time.Time) {
	if o.Kind != Poll && o.TicketCall.IsZero() {
		return o.Call, o.Return
	}
	from, to = o.TicketCall, o.Return
	if from.IsZero() {
		from = o.Call
	}
	if !o.AcquiredAt.IsZero() {
		f := maxTime(from, o.AcquiredAt.Add(-Slack))
		t := minTime(to, o.AcquiredAt.Add(time.Millisecond+Slack))
		if !f.After(t) {
			from, to = f, t
		}
	}
	return from, to
}

// Check checks each lock's history in ops; Loss operations belong to their lock,
// or, without one, to every lock.
// Each lock's check gets at most timeout (0: none). dir, when not empty, receives
// an HTML visualization of each violation.
func Check(ops []Op, timeout time.Duration, dir string) Result {
	var res Result
	if len(ops) == 0 {
		return res
	}
	base := ops[0].Call
	for _, o := range ops {
		if o.Call.Before(base) {
			base = o.Call
		}
	}
	byLock := map[string][]Op{}
	var losses []Op
	for _, o := range ops {
		switch {
		case o.Kind == Loss && o.Lock == "":
			losses = append(losses, o)
		case o.Kind == Loss:
			byLock[o.Lock] = append(byLock[o.Lock], o)
		case relevant(o):
			byLock[o.Lock] = append(byLock[o.Lock], o)
		}
	}
	locks := make([]string, 0, len(byLock))
	for l := range byLock {
		locks = append(locks, l)
	}
	sort.Strings(locks)
	for _, lock := range locks {
		lops := append(byLock[lock], losses...)
		sort.SliceStable(lops, func(i, j int) bool { return lops[i].Call.Before(lops[j].Call) })
		history := operations(lops, base)
		res.Locks++
		res.Checked += len(history)
		out, info := porcupine.CheckOperationsVerbose(model, history, timeout)
		switch out {
		case porcupine.Illegal:
			v := Violation{Lock: lock, Excerpt: excerpt(lops, history, info)}
			if dir != "" {
				p := filepath.Join(dir, "violation-"+safeName(lock)+".html")
				if err := porcupine.VisualizePath(model, info, p); err == nil {
					v.HTML = p
				}
			}
			res.Violations = append(res.Violations, v)
		case porcupine.Unknown:
			res.Inconclusive = append(res.Inconclusive, lock)
		}
	}
	return res
}

// relevant reports whether an operation can make a history illegal. Not: 423s,
// 202s and 410s (always allowed, see the model); cancels; and Acquire or Poll
// with an unknown outcome: a grant the client never learned of gives a lease
// nobody can act on, and since the operation may also be put last, where it
// changes nothing that is checked, leaving it out allows and forbids exactly the
// same histories.
func relevant(o Op) bool {
	switch o.Kind {
	case Acquire, Poll:
		return o.Outcome == OK
	case Reenter, Renew, Release:
		return o.Outcome == OK || o.Outcome == NotHeld || o.Outcome == Unknown
	case Get: // a read with an unknown outcome tells nothing
		return o.Outcome == OK || o.Outcome == NotHeld
	}
	return false
}

// operations turns one lock's operations into porcupine's, times in µs since base.
// A hold granted twice (a retried ticket poll, a replayed Idempotency-Key) is a
// grant and then a read. A hold is a lease and its fence: after Redis lost its
// data, a retry with the same Idempotency-Key is a new hold with the same
// (derived) lease id and a new fence.
func operations(ops []Op, base time.Time) []porcupine.Operation {
	us := func(t time.Time) int64 { return t.UnixMicro() - base.UnixMicro() }
	type leaseFence struct {
		lease string
		fence int64
	}
	granted := map[leaseFence]bool{}
	h := make([]porcupine.Operation, 0, len(ops))
	for i, o := range ops {
		in := &input{kind: o.Kind, outcome: o.Outcome, lease: o.Lease, fence: o.Fence, count: o.Count,
			released: o.Released, shared: o.Shared, limit: o.Limit, call: us(o.Call), ret: us(o.Return),
			ttl: o.TTL.Microseconds(), idx: i}
		if !o.ExpiresAt.IsZero() {
			in.expires = us(o.ExpiresAt)
		}
		if o.Kind == Acquire || o.Kind == Poll {
			if lf := (leaseFence{o.Lease, o.Fence}); granted[lf] {
				in.kind = Get
			} else {
				granted[lf] = true
				from, to := GrantWindow(o)
				in.call, in.ret = us(from), us(to)
			}
		}
		if o.Outcome == Unknown {
			in.ret = never
		}
		h = append(h, porcupine.Operation{ClientId: o.Client, Input: in, Call: in.call, Return: in.ret})
	}
	return h
}

// excerpt describes where the longest partial order porcupine found got stuck.
func excerpt(ops []Op, h []porcupine.Operation, info porcupine.LinearizationInfo) []string {
	var best []int
	if parts := info.PartialLinearizations(); len(parts) > 0 {
		for _, p := range parts[0] {
			if len(p) > len(best) {
				best = p
			}
		}
	}
	var lines []string
	st := model.Init()
	in := make(map[int]bool, len(best))
	for _, id := range best {
		_, st = model.Step(st, h[id].Input, nil)
		in[id] = true
	}
	lines = append(lines, fmt.Sprintf("the longest legal order covers %d of %d operations; it ends:", len(best), len(h)))
	from := max(0, len(best)-8)
	for _, id := range best[from:] {
		lines = append(lines, "  "+ops[h[id].Input.(*input).idx].String())
	}
	lines = append(lines, "state then: "+model.DescribeState(st))
	// The next operation must be one called before the earliest return of the rest.
	var rest []int
	minRet := int64(never)
	for id := range h {
		if !in[id] {
			rest = append(rest, id)
			minRet = min(minRet, h[id].Return)
		}
	}
	lines = append(lines, "none of these can come next:")
	n := 0
	for _, id := range rest {
		if h[id].Call <= minRet && n < 8 {
			lines = append(lines, "  "+ops[h[id].Input.(*input).idx].String())
			n++
		}
	}
	return lines
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ':' {
			return '_'
		}
		return r
	}, s)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
