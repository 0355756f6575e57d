package check

import (
	"fmt"
	"time"
)

// LostResult counts lost answers: tries that got a transport error or a 5xx
// (Op.Lost), their client still there.
type LostResult struct {
	// Up and Down are the acquires with an Idempotency-Key whose answer was
	// lost, by whether Redis was up when the last lost try ended (Down: within
	// a span in which Redis was out of Baton's reach or failing over, until
	// the service was seen working again); UpSettled and DownSettled are those
	// of them that a later try with the key settled (got an answer).
	Up, UpSettled     int
	Down, DownSettled int
	// Plain are the acquires without a key whose answer was lost while Redis
	// was up: no retry can settle those (the gateway alone can, before it
	// answers); PlainDown, those lost while it was not.
	Plain, PlainDown int
	// Unsettled are the keys lost while Redis was up that no later try
	// settled: violations.
	Unsettled []string
}

// Share is the share of the keys lost while Redis was up that a retry
// settled, in percent; 100 when none was lost.
func (r LostResult) Share() float64 {
	if r.Up == 0 {
		return 100
	}
	return 100 * float64(r.UpSettled) / float64(r.Up)
}

// LostAnswers judges, for each acquire with an Idempotency-Key whose answer was
// lost, whether retrying with the key settled it: a try after the last lost
// one got an answer (a lease, a ticket, a 423, a 409: anything but another
// unknown outcome). A client that loses an answer sends the same key and body
// again until it is answered; while Redis is up, it must be. ops must be in
// the order they were called (Recorder.Ops).
func LostAnswers(ops []Op, spans []Span) LostResult {
	var res LostResult
	outages := merge(spans)
	down := func(t time.Time) bool {
		for _, s := range outages {
			if !t.Before(s.From) && !t.After(s.To) {
				return true
			}
		}
		return false
	}
	type tries struct {
		lastLost *Op
		settled  bool
	}
	keys := map[string]*tries{}
	var order []string
	for i := range ops {
		o := &ops[i]
		if o.Kind != Acquire || o.HungUp {
			continue
		}
		if o.IdemKey == "" {
			switch {
			case !o.Lost:
			case down(o.Return):
				res.PlainDown++
			default:
				res.Plain++
			}
			continue
		}
		k := keys[o.IdemKey]
		if k == nil {
			k = &tries{}
			keys[o.IdemKey] = k
			order = append(order, o.IdemKey)
		}
		switch {
		case o.Lost:
			k.lastLost, k.settled = o, false
		case k.lastLost != nil && o.Outcome != Unknown:
			k.settled = true
		}
	}
	for _, key := range order {
		k := keys[key]
		if k.lastLost == nil {
			continue
		}
		if down(k.lastLost.Return) {
			res.Down++
			if k.settled {
				res.DownSettled++
			}
			continue
		}
		res.Up++
		if k.settled {
			res.UpSettled++
			continue
		}
		res.Unsettled = append(res.Unsettled, fmt.Sprintf("an acquire with an Idempotency-Key lost its answer while Redis was up, "+
			"and no later try settled it: %s", k.lastLost))
	}
	return res
}
