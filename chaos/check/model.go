package check

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Slack is how far apart two wall-clock readings of the same moment may be: this
// process's and Redis's (both read the machine's clock; expires_at and acquired_at
// are whole milliseconds), plus scheduling. It only ever widens what the model
// allows.
const Slack = 25 * time.Millisecond

// never is a time after every other: the return of an operation whose outcome is
// unknown, and the latest expiry of a lease whose renewal may have happened.
const never = math.MaxInt64 / 4

// The model of one lock, for porcupine. A lock has holds: at most one exclusive
// hold and nothing beside it, or shared holds (API.md, "Shared holds"), at most
// the lock's limit of them, the limit set by the first shared hold of a free
// lock. A history is legal when its operations can be put in an order that
// respects real time (an operation that returned before another was called
// comes first) and in which every step below is allowed:
//
//   - a grant (Acquire or Poll answered with a lease) only when the new hold
//     fits: an exclusive one when no hold is left, a shared one when no
//     exclusive hold is left and fewer shared ones than the limit (and, while
//     shared holds are left, only under their limit); and with a fence above
//     every fence granted before, shared or exclusive (one counter: every
//     hold, shared ones included, gets a new fence);
//   - re-entry, renewal, release and reads succeed only for a live hold, with
//     its fence, mode and count (re-entry adds one, release takes one, at zero
//     the hold ends);
//   - a 404 lease-not-held for a hold only once its lease may have run out;
//   - lease expiry is a step of its own, per hold, taken lazily: an operation
//     may treat a hold as gone when its linearization point can lie at or
//     after the lease's end (its return + Slack >= the earliest end), and must
//     when its point lies after the lease's latest end. The point lies at or
//     after the operation's call and every earlier point, so the state carries
//     that floor along. A shared grant that needs room may end any of the holds
//     that may have run out: the model tries each choice (it is
//     nondeterministic there, and only there);
//   - a Loss (Redis restarted empty) frees the lock at once, whoever held it;
//     fences go on increasing across it (lib.lua's time floor promises that);
//   - an operation with an unknown outcome never returns (its return is "never"):
//     it may take effect at any point after its call, or in effect not at all (put
//     last). A renewal or re-entry that may have happened leaves the lease's end
//     between the earliest it can be and never.
//
// What the model does not check: progress and fairness. A 423, a 202 and a 410
// are always allowed, because who else is queued, and whether a ticket is still
// alive, depends on polls the model does not see; so are grants made to tickets
// whose owner never learned of them (nobody can act on those).

// hold is one hold of a lock.
type hold struct {
	lease  string
	count  int
	fence  int64
	shared bool
	// The lease ends in [endMin, endMax] (µs).
	endMin, endMax int64
}

// state is one lock's state. holds is sorted by lease and never changed in
// place: a step that changes it makes a new slice.
type state struct {
	holds []hold
	limit int   // the shared holds' limit while there are any (0: none)
	last  int64 // the highest fence granted so far
	// floor (µs): the next operation's linearization point is not before it.
	floor int64
}

// input is one operation as the model sees it; times are µs since the history's
// first call.
type input struct {
	kind     Kind
	outcome  Outcome
	lease    string
	fence    int64
	count    int
	released bool
	shared   bool // a lease answer's mode; for a grant, the new hold's
	limit    int  // a shared grant's limit (0: none)
	call     int64
	ret      int64 // never when the outcome is unknown
	expires  int64 // the lease's end from the answer, OK lease answers only
	ttl      int64
	idx      int // the operation's index in the lock's history
}

var slackMicros = Slack.Microseconds()

// find returns the index of lease's hold, or -1.
func (s state) find(lease string) int {
	for i, h := range s.holds {
		if h.lease == lease {
			return i
		}
	}
	return -1
}

// with returns s with hold i replaced by h (i < 0: h added).
func (s state) with(i int, h hold) state {
	hs := make([]hold, 0, len(s.holds)+1)
	added := i >= 0
	for j, x := range s.holds {
		if j == i {
			x = h
		}
		if !added && h.lease < x.lease {
			hs, added = append(hs, h), true
		}
		hs = append(hs, x)
	}
	if !added {
		hs = append(hs, h)
	}
	s.holds = hs
	return s
}

// keep returns s with only the holds keep keeps.
func (s state) keep(keep func(hold) bool) state {
	var hs []hold
	for _, h := range s.holds {
		if keep(h) {
			hs = append(hs, h)
		}
	}
	if len(hs) == len(s.holds) {
		return s
	}
	s.holds = hs
	if len(hs) == 0 || !hs[0].shared {
		s.limit = 0 // a limit lasts while shared holds do
	}
	return s
}

// step applies one operation to s: the states it can lead to, none when the
// operation is not allowed.
func step(s state, in *input) []state {
	lo := max(s.floor, in.call)
	s.floor = lo
	// Holds whose lease has certainly run out by now are gone.
	s = s.keep(func(h hold) bool { return lo-slackMicros <= h.endMax })
	// mayEnd: the hold's lease may have run out by this operation's point.
	mayEnd := func(h hold) bool { return in.ret+slackMicros >= h.endMin }

	switch in.kind {
	case Loss:
		s.holds, s.limit = nil, 0
		return []state{s}
	case Acquire, Poll: // a grant
		if in.fence <= s.last {
			return nil
		}
		return grantStep(s, in, mayEnd)
	}

	i := s.find(in.lease)
	switch in.outcome {
	case NotHeld:
		if i < 0 {
			return []state{s}
		}
		if !mayEnd(s.holds[i]) {
			return nil
		}
		lease := in.lease
		return []state{s.keep(func(h hold) bool { return h.lease != lease })} // it ran out
	case Unknown:
		if i < 0 {
			return []state{s} // it found nothing to act on
		}
		h := s.holds[i]
		switch in.kind {
		case Reenter:
			h.count++
			h.endMin, h.endMax = lo+in.ttl-slackMicros, never
		case Renew:
			h.endMin, h.endMax = lo+in.ttl-slackMicros, never
		case Release:
			h.count--
			if h.count == 0 {
				lease := in.lease
				return []state{s.keep(func(h hold) bool { return h.lease != lease })}
			}
		}
		return []state{s.with(i, h)}
	}

	// OK
	if i < 0 {
		return nil
	}
	h := s.holds[i]
	if in.fence != h.fence || (in.kind != Release && in.shared != h.shared) {
		return nil
	}
	switch in.kind {
	case Reenter:
		if in.count != h.count+1 {
			return nil
		}
		h.count = in.count
		h.endMin, h.endMax = in.expires-slackMicros, in.expires+slackMicros
	case Renew:
		if in.count != h.count {
			return nil
		}
		h.endMin, h.endMax = in.expires-slackMicros, in.expires+slackMicros
	case Get:
		if in.count != h.count {
			return nil
		}
	case Release:
		if in.count != h.count-1 || in.released != (in.count == 0) {
			return nil
		}
		if in.count == 0 {
			lease := in.lease
			return []state{s.keep(func(h hold) bool { return h.lease != lease })}
		}
		h.count = in.count
	default:
		return nil
	}
	return []state{s.with(i, h)}
}

// grantStep applies a grant whose fence is new: the states in which the new
// hold fits, having ended holds that may have run out to make room.
func grantStep(s state, in *input, mayEnd func(hold) bool) []state {
	h := hold{lease: in.lease, count: 1, fence: in.fence, shared: in.shared,
		endMin: in.expires - slackMicros, endMax: in.expires + slackMicros}
	grant := func(s state) state {
		s = s.with(-1, h)
		s.last = in.fence
		if in.shared {
			s.limit = in.limit
		}
		return s
	}
	var sure, maybe []hold // shared holds that cannot have ended, and that may have
	for _, x := range s.holds {
		switch {
		case !x.shared || !in.shared || x.lease == in.lease:
			// An exclusive hold, or any hold beside a new exclusive one, must end.
			if !mayEnd(x) {
				return nil
			}
		case mayEnd(x):
			maybe = append(maybe, x)
		default:
			sure = append(sure, x)
		}
	}
	if !in.shared || len(sure)+len(maybe) == 0 {
		s.holds, s.limit = nil, 0
		return []state{grant(s)}
	}
	if s.limit != in.limit {
		// Another limit while shared holds are left: only if every one has ended.
		if len(sure) > 0 {
			return nil
		}
		s.holds, s.limit = nil, 0
		return []state{grant(s)}
	}
	need := len(sure) + len(maybe) + 1 - in.limit // holds that must have ended
	if in.limit == 0 || need <= 0 {
		s.holds = append(append([]hold(nil), sure...), maybe...)
		sortHolds(s.holds)
		return []state{grant(s)}
	}
	if need > len(maybe) {
		return nil
	}
	var out []state
	for _, kept := range choose(maybe, len(maybe)-need) {
		t := s
		t.holds = append(append([]hold(nil), sure...), kept...)
		sortHolds(t.holds)
		out = append(out, grant(t))
	}
	return out
}

// choose returns every k-element subset of hs, in order.
func choose(hs []hold, k int) [][]hold {
	if k == 0 {
		return [][]hold{nil}
	}
	if k > len(hs) {
		return nil
	}
	var out [][]hold
	for _, rest := range choose(hs[1:], k-1) {
		out = append(out, append([]hold{hs[0]}, rest...))
	}
	return append(out, choose(hs[1:], k)...)
}

func sortHolds(hs []hold) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].lease < hs[j-1].lease; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

func equal(a, b state) bool {
	if a.limit != b.limit || a.last != b.last || a.floor != b.floor || len(a.holds) != len(b.holds) {
		return false
	}
	for i := range a.holds {
		if a.holds[i] != b.holds[i] {
			return false
		}
	}
	return true
}

func hash(s state) uint64 {
	h := fnv.New64a()
	for _, x := range s.holds {
		_, _ = h.Write([]byte(x.lease))
	}
	v := h.Sum64() ^ uint64(s.last) ^ uint64(s.floor)<<2 ^ uint64(s.limit)<<3
	for _, x := range s.holds {
		v ^= uint64(x.count)*0x9e3779b97f4a7c15 ^ uint64(x.endMin)<<1
	}
	return v
}

func describe(s state) string {
	if len(s.holds) == 0 {
		return fmt.Sprintf("free, last fence %d", s.last)
	}
	var parts []string
	for _, h := range s.holds {
		mode := "exclusive"
		if h.shared {
			mode = "shared"
		}
		parts = append(parts, fmt.Sprintf("%s %s x%d fence %d, ends in [%d, %d]µs", short(h.lease), mode, h.count, h.fence, h.endMin, h.endMax))
	}
	s0 := strings.Join(parts, "; ")
	if s.limit > 0 {
		s0 += fmt.Sprintf(" (limit %d)", s.limit)
	}
	return s0 + fmt.Sprintf("; last fence %d", s.last)
}

// nmodel is the model of one lock's history; Check partitions by lock.
var nmodel = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{state{}} },
	Step: func(st, in, _ interface{}) []interface{} {
		next := step(st.(state), in.(*input))
		out := make([]interface{}, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	Equal: func(a, b interface{}) bool { return equal(a.(state), b.(state)) },
	Hash:  func(st interface{}) uint64 { return hash(st.(state)) },
	DescribeOperation: func(in, _ interface{}) string {
		i := in.(*input)
		s := fmt.Sprintf("%s %s %s", i.kind, short(i.lease), i.outcome)
		if i.outcome == OK {
			s += fmt.Sprintf(" f=%d c=%d", i.fence, i.count)
			if i.shared {
				s += " shared"
			}
		}
		return s
	},
	DescribeState: func(st interface{}) string { return describe(st.(state)) },
}

// model is nmodel as porcupine checks it: its state is the set of states the
// lock can be in.
var model = nmodel.ToModel()
