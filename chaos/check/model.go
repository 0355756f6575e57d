package check

import (
	"fmt"
	"hash/fnv"
	"math"
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

// The model of one lock, for porcupine. A history is legal when its operations can
// be put in an order that respects real time (an operation that returned before
// another was called comes first) and in which every step below is allowed:
//
//   - a grant (Acquire or Poll answered with a lease) only when nobody holds the
//     lock, and with a fence above every fence granted before;
//   - re-entry, renewal, release and reads succeed only for the holder, with the
//     holder's fence and count (re-entry adds one, release takes one, at zero the
//     lock is free);
//   - a 404 lease-not-held for the holder only once its lease may have run out;
//   - lease expiry is a step of its own, taken lazily: an operation may treat the
//     holder as gone when its linearization point can lie at or after the lease's
//     end (its return + Slack >= the earliest end), and must when its point lies
//     after the lease's latest end. The point lies at or after the operation's
//     call and every earlier point, so the state carries that floor along;
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

// state is one lock's state; it is compared with ==.
type state struct {
	holder string // the holding lease; "" when free
	count  int    // holds of the holder
	fence  int64  // the holder's fence
	last   int64  // the highest fence granted so far
	// The holder's lease ends in [endMin, endMax] (µs).
	endMin, endMax int64
	// floor (µs): the next operation's linearization point is not before it.
	floor int64
}

func (s state) free() state {
	s.holder, s.count, s.fence, s.endMin, s.endMax = "", 0, 0, 0, 0
	return s
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
	call     int64
	ret      int64 // never when the outcome is unknown
	expires  int64 // the lease's end from the answer, OK lease answers only
	ttl      int64
	idx      int // the operation's index in the lock's history
}

var slackMicros = Slack.Microseconds()

// step applies one operation to s. It reports whether the operation is allowed.
func step(s state, in *input) (bool, state) {
	lo := max(s.floor, in.call)
	s.floor = lo
	if s.holder != "" && lo-slackMicros > s.endMax {
		s = s.free() // the lease has certainly run out by now
	}
	// The lease may have run out by this operation's point.
	mayHaveEnded := s.holder != "" && in.ret+slackMicros >= s.endMin
	held := s.holder != "" && s.holder == in.lease

	switch in.kind {
	case Loss:
		return true, s.free()
	case Acquire, Poll: // a grant
		if in.fence <= s.last || (s.holder != "" && !mayHaveEnded) {
			return false, s
		}
		return true, state{holder: in.lease, count: 1, fence: in.fence, last: in.fence,
			endMin: in.expires - slackMicros, endMax: in.expires + slackMicros, floor: lo}
	}

	switch in.outcome {
	case NotHeld:
		if held && !mayHaveEnded {
			return false, s
		}
		if held {
			s = s.free() // it ran out
		}
		return true, s
	case Unknown:
		if !held {
			return true, s // it found nothing to act on
		}
		switch in.kind {
		case Reenter:
			s.count++
			s.endMin, s.endMax = lo+in.ttl-slackMicros, never
		case Renew:
			s.endMin, s.endMax = lo+in.ttl-slackMicros, never
		case Release:
			s.count--
			if s.count == 0 {
				s = s.free()
			}
		}
		return true, s
	}

	// OK
	if !held || in.fence != s.fence {
		return false, s
	}
	switch in.kind {
	case Reenter:
		if in.count != s.count+1 {
			return false, s
		}
		s.count = in.count
		s.endMin, s.endMax = in.expires-slackMicros, in.expires+slackMicros
	case Renew:
		if in.count != s.count {
			return false, s
		}
		s.endMin, s.endMax = in.expires-slackMicros, in.expires+slackMicros
	case Get:
		if in.count != s.count {
			return false, s
		}
	case Release:
		if in.count != s.count-1 || in.released != (in.count == 0) {
			return false, s
		}
		s.count = in.count
		if s.count == 0 {
			s = s.free()
		}
	default:
		return false, s
	}
	return true, s
}

// model is the porcupine model of one lock's history; Check partitions by lock.
var model = porcupine.Model{
	Init: func() interface{} { return state{} },
	Step: func(st, in, _ interface{}) (bool, interface{}) {
		return step(st.(state), in.(*input))
	},
	Hash: func(st interface{}) uint64 {
		s := st.(state)
		h := fnv.New64a()
		_, _ = h.Write([]byte(s.holder))
		return h.Sum64() ^ uint64(s.count)*0x9e3779b97f4a7c15 ^ uint64(s.last) ^ uint64(s.endMin)<<1 ^ uint64(s.floor)<<2
	},
	DescribeOperation: func(in, _ interface{}) string {
		i := in.(*input)
		s := fmt.Sprintf("%s %s %s", i.kind, short(i.lease), i.outcome)
		if i.outcome == OK {
			s += fmt.Sprintf(" f=%d c=%d", i.fence, i.count)
		}
		return s
	},
	DescribeState: func(st interface{}) string {
		s := st.(state)
		if s.holder == "" {
			return fmt.Sprintf("free, last fence %d", s.last)
		}
		return fmt.Sprintf("%s x%d fence %d, ends in [%d, %d]µs", short(s.holder), s.count, s.fence, s.endMin, s.endMax)
	},
}
