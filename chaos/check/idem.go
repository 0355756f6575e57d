package check

import (
	"fmt"
	"sort"
	"time"
)

// IdemResult is what Idempotency found.
type IdemResult struct {
	Keys    int // acquires that carried an Idempotency-Key
	Retried int // of them, sent again after a try whose answer was lost
	// Lost are the keys one of whose tries got no answer (an unknown
	// outcome), and Resolved those of them whose last try got one: what
	// retrying with the key settled.
	Lost, Resolved int
	Replays        int // tries answered with Idempotent-Replayed
	Used           int // tries answered 409 idempotency-key-used
	// Excused are second holds of one key that the contract allows: Redis lost
	// the key's record (a Loss), or the first hold had ended more than the
	// grace before.
	Excused int
	// Fresh are second holds of one key made once the first, which no client
	// was ever told of, was gone: Baton ends such a hold and forgets its key,
	// and a retry is a fresh attempt (API.md, "Idempotency-Key").
	Fresh int
	// Wrong are the violations: a key that made a second hold, or an answer
	// that repeats an earlier one's lease without saying it is a replay.
	Wrong []string
}

// lf is a hold as its answers name it: a lease and its fence. After Redis lost
// its data, a retry with the same key is a new hold with the same (derived)
// lease id and a new fence.
type lf struct {
	lease string
	fence int64
}

// holdSeen is one hold, by lock and fence, as answers and readings show it.
type holdSeen struct {
	lock    string
	fence   int64
	lease   string
	granted time.Time // on the Redis clock; zero when unknown
	end     time.Time // the latest moment it may have lasted to
	sampled bool      // seen by the sampler (else only in answers)
	seen    time.Time // the last reading that showed it
	told    bool      // an answer reported it to a client
}

// Idempotency judges the acquires that carried an Idempotency-Key (API.md,
// "Idempotency-Key"). Every try of one key carries the same body, so the same
// owner label: however often it is sent, one key makes at most one hold, be
// it granted at once or through its ticket, answered or only read by the
// sampler. Two holds with one key's label are a violation, unless a Loss lies
// between them (Redis forgot the key) or the second was granted more than
// grace after the first had certainly ended (the key was forgotten by then).
// An answer with a lease an earlier try of the key was already answered with
// must say Idempotent-Replayed.
func Idempotency(ops []Op, samples []Sample, grace time.Duration) IdemResult {
	var res IdemResult
	type tries struct {
		owner, lock string
		lost        bool // a try's answer was lost
		retried     bool
		settled     bool        // its latest try got an answer
		holds       map[lf]bool // by lease and fence
	}
	keys := map[string]*tries{}
	var order []string
	labels := map[string]bool{} // the owner labels of keyed acquires
	for _, o := range ops {
		if o.Kind != Acquire || o.IdemKey == "" {
			continue
		}
		k := keys[o.IdemKey]
		if k == nil {
			k = &tries{owner: o.Owner, lock: o.Lock, holds: map[lf]bool{}}
			keys[o.IdemKey] = k
			order = append(order, o.IdemKey)
		}
		labels[o.Owner] = true
		if k.lost && o.Try > 1 {
			k.retried = true
		}
		if o.Outcome == Unknown {
			k.lost = true
		}
		k.settled = o.Outcome != Unknown
		if o.Replayed {
			res.Replays++
		}
		if o.Outcome == Used {
			res.Used++
		}
		if o.Outcome == OK {
			if h := (lf{o.Lease, o.Fence}); k.holds[h] && !o.Replayed {
				res.Wrong = append(res.Wrong, "an answer repeats the lease of an earlier try of its key without Idempotent-Replayed: "+o.String())
			} else {
				k.holds[h] = true
			}
		}
	}
	res.Keys = len(keys)
	for _, key := range order {
		k := keys[key]
		if k.retried {
			res.Retried++
		}
		if k.lost {
			res.Lost++
			if k.settled {
				res.Resolved++
			}
		}
	}

	// Every hold of a keyed label, from answers and readings.
	type lockFence struct {
		lock  string
		fence int64
	}
	holds := map[lockFence]*holdSeen{}
	byLabel := map[string][]*holdSeen{}
	leaseOf := map[string]*holdSeen{}
	see := func(lock, owner string, fence int64) *holdSeen {
		h := holds[lockFence{lock, fence}]
		if h == nil {
			h = &holdSeen{lock: lock, fence: fence}
			holds[lockFence{lock, fence}] = h
			byLabel[owner] = append(byLabel[owner], h)
		}
		return h
	}
	for _, s := range samples {
		if s.Held && labels[s.Owner] {
			h := see(s.Lock, s.Owner, s.Fence)
			h.sampled = true
			h.seen = maxTime(h.seen, s.Got)
			h.granted = s.GrantedAt
			h.end = maxTime(h.end, s.Got.Add(s.PTTL))
		}
	}
	// The latest each hold may have lasted to: its lease's expiries, renewals
	// of unknown outcome as if they had happened, or its release. Operations
	// on a lease concern its latest grant (ops are in the order they returned).
	released := map[*holdSeen]time.Time{}
	for _, o := range ops {
		if (o.Kind == Acquire || o.Kind == Poll) && o.Outcome == OK && labels[o.Owner] {
			h := see(o.Lock, o.Owner, o.Fence)
			h.lease, h.told = o.Lease, true
			leaseOf[o.Lease] = h
			if h.granted.IsZero() {
				h.granted = o.AcquiredAt
			}
		}
		h := leaseOf[o.Lease]
		if h == nil {
			continue
		}
		switch {
		case o.Outcome == OK && !o.ExpiresAt.IsZero():
			h.end = maxTime(h.end, o.ExpiresAt)
		case o.Outcome == Unknown && (o.Kind == Renew || o.Kind == Reenter):
			h.end = maxTime(h.end, o.Return.Add(o.TTL))
		}
		if o.Kind == Release && o.Outcome == OK && o.Released {
			released[h] = o.Return
		}
	}
	for h, at := range released {
		h.end = at
	}
	var losses []Op
	for _, o := range ops {
		if o.Kind == Loss {
			losses = append(losses, o)
		}
	}
	lostBetween := func(lock string, from, to time.Time) bool {
		for _, l := range losses {
			if (l.Lock == "" || l.Lock == lock) && !l.Call.After(to) && (l.Outcome == Unknown || !l.Return.Before(from)) {
				return true
			}
		}
		return false
	}
	labelList := make([]string, 0, len(byLabel))
	for l := range byLabel {
		labelList = append(labelList, l)
	}
	sort.Strings(labelList)
	for _, label := range labelList {
		hs := byLabel[label]
		if len(hs) < 2 {
			continue
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].fence < hs[j].fence })
		for i := 1; i < len(hs); i++ {
			a, b := hs[i-1], hs[i]
			if !a.granted.IsZero() && !b.granted.IsZero() && (lostBetween(b.lock, a.granted, b.granted) ||
				(!a.end.IsZero() && b.granted.After(a.end.Add(grace+Slack)))) {
				res.Excused++
				continue
			}
			if !a.told && a.sampled && !b.granted.IsZero() && goneBefore(samples, a, b.granted) {
				res.Fresh++
				continue
			}
			res.Wrong = append(res.Wrong, fmt.Sprintf("the acquire labelled %s made two holds on %s: fence %d (lease %s, granted %s, "+
				"ended by %s) and fence %d (lease %s, granted %s)", label, b.lock, a.fence, short(a.lease), clock(a.granted),
				clock(a.end), b.fence, short(b.lease), clock(b.granted)))
		}
	}
	return res
}

// goneBefore reports whether a reading of h's lock taken after the last one
// that showed h, and before t, showed the lock without h: h had ended by t.
func goneBefore(samples []Sample, h *holdSeen, t time.Time) bool {
	for _, s := range samples {
		if s.Lock == h.lock && s.Sent.After(h.seen) && !s.Got.After(t) {
			return true
		}
	}
	return false
}
