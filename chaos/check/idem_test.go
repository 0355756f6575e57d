package check

import (
	"strings"
	"testing"
	"time"
)

// keyed is try of an Acquire with Idempotency-Key key, labelled owner; first
// is when the key's first try was called (ms), for a try after the first.
func keyed(o Op, key, owner string, try, first int) Op {
	o.IdemKey, o.Owner, o.Try = key, owner, try
	if try > 1 {
		o.TicketCall = ms(first)
	}
	return o
}

// lost is an Acquire whose answer was lost.
func lost(client, call, ret int) Op {
	return Op{Client: client, Lock: "l", Kind: Acquire, Call: ms(call), Return: ms(ret), Outcome: Unknown}
}

func replayed(o Op) Op { o.Replayed = true; return o }

func granted(o Op, at int) Op { o.AcquiredAt = ms(at); return o }

func TestIdempotency(t *testing.T) {
	tests := []struct {
		name    string
		ops     []Op
		samples []Sample
		wrong   int
		excused int
		fresh   int
		used    int
	}{
		{name: "a lost answer, then the same lease replayed",
			ops: []Op{keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
				keyed(replayed(granted(grant(1, "A", 10, 100, 105, 1000), 20)), "k", "c1.1", 2, 0),
				keyed(replayed(granted(grant(1, "A", 10, 110, 115, 1000), 20)), "k", "c1.1", 3, 0)},
			samples: []Sample{held(60, 10, "c1.1", 20)}},
		{name: "the retry made a second hold",
			ops: []Op{keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
				keyed(granted(grant(1, "B", 11, 100, 105, 1000), 102), "k", "c1.1", 2, 0)},
			samples: []Sample{held(60, 10, "c1.1", 20)},
			wrong:   1},
		{name: "a fresh hold once Baton ended one nobody was told of",
			ops: []Op{keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
				keyed(granted(grant(1, "A", 11, 100, 105, 1000), 102), "k", "c1.1", 2, 0)},
			samples: []Sample{held(60, 10, "c1.1", 20), free(80)},
			fresh:   1},
		{name: "a second hold beside one nobody was told of",
			ops: []Op{keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
				keyed(granted(grant(1, "A", 11, 100, 105, 1000), 102), "k", "c1.1", 2, 0)},
			samples: []Sample{held(60, 10, "c1.1", 20), held(90, 10, "c1.1", 20), free(110)},
			wrong:   1},
		{name: "a second hold after Redis lost the key",
			ops: []Op{keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
				{Kind: Loss, Call: ms(70), Return: ms(90), Outcome: OK, Client: -1},
				keyed(granted(grant(1, "B", 11, 100, 105, 1000), 102), "k", "c1.1", 2, 0)},
			samples: []Sample{held(60, 10, "c1.1", 20)},
			excused: 1},
		{name: "after Redis lost the key, the same (derived) lease id with a new fence",
			ops: []Op{keyed(granted(grant(1, "A", 10, 0, 5, 1000), 2), "k", "c1.1", 1, 0),
				{Kind: Loss, Call: ms(70), Return: ms(90), Outcome: OK, Client: -1},
				keyed(granted(grant(1, "A", 5000, 100, 105, 1000), 102), "k", "c1.1", 2, 0)},
			excused: 1},
		{name: "a second hold long after the first ended",
			ops: []Op{keyed(granted(grant(1, "A", 10, 0, 5, 100), 2), "k", "c1.1", 1, 0),
				release(1, "A", 10, 10, 15, 0),
				keyed(granted(grant(1, "B", 11, 2000, 2005, 1000), 2002), "k", "c1.1", 2, 0)},
			excused: 1},
		{name: "a second hold within the grace after the first ended",
			ops: []Op{keyed(granted(grant(1, "A", 10, 0, 5, 100), 2), "k", "c1.1", 1, 0),
				release(1, "A", 10, 10, 15, 0),
				keyed(granted(grant(1, "B", 11, 500, 505, 1000), 502), "k", "c1.1", 2, 0)},
			wrong: 1},
		{name: "a retry within the grace after the hold ended: 409",
			ops: []Op{keyed(granted(grant(1, "A", 10, 0, 5, 100), 2), "k", "c1.1", 1, 0),
				release(1, "A", 10, 10, 15, 0),
				keyed(Op{Client: 1, Lock: "l", Kind: Acquire, Call: ms(500), Return: ms(505), Outcome: Used}, "k", "c1.1", 2, 0)},
			used: 1},
		{name: "the same lease again, not marked replayed",
			ops: []Op{keyed(granted(grant(1, "A", 10, 0, 5, 1000), 2), "k", "c1.1", 1, 0),
				keyed(granted(grant(1, "A", 10, 10, 15, 1000), 2), "k", "c1.1", 2, 0)},
			wrong: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.samples {
				tt.samples[i].Owner = "c1.1"
			}
			r := Idempotency(tt.ops, tt.samples, time.Second)
			if len(r.Wrong) != tt.wrong || r.Excused != tt.excused || r.Fresh != tt.fresh || r.Used != tt.used {
				t.Fatalf("wrong %d (%s), excused %d, fresh %d, used %d; want %d, %d, %d, %d", len(r.Wrong), strings.Join(r.Wrong, "; "),
					r.Excused, r.Fresh, r.Used, tt.wrong, tt.excused, tt.fresh, tt.used)
			}
		})
	}
}

// A key whose answer was lost counts as resolved once a later try of it got an
// answer, whatever it was; one whose last try got none does not.
func TestIdempotencyLostAnswersResolved(t *testing.T) {
	ops := []Op{
		keyed(lost(1, 0, 50), "k", "c1.1", 1, 0),
		keyed(replayed(granted(grant(1, "A", 10, 100, 105, 1000), 20)), "k", "c1.1", 2, 0),
		keyed(lost(2, 0, 50), "m", "c2.1", 1, 0),
		keyed(lost(2, 60, 90), "m", "c2.1", 2, 0),
		keyed(granted(grant(3, "C", 11, 2000, 2005, 100), 2002), "n", "c3.1", 1, 0),
	}
	r := Idempotency(ops, nil, time.Second)
	if r.Lost != 2 || r.Resolved != 1 {
		t.Fatalf("lost %d, resolved %d; want 2 lost (k, m), 1 resolved (k)", r.Lost, r.Resolved)
	}
}

// A retry's grant may have been made by its first try: the model places it
// anywhere since, here before a shared grant another client got meanwhile.
func TestCheckRetriedGrant(t *testing.T) {
	a := keyed(replayed(sgrant(1, "A", 10, 40, 45, 1000, 0)), "k", "c1.1", 2, 0)
	a.AcquiredAt, a.ExpiresAt = ms(5), ms(1005) // granted by the first try
	ops := []Op{keyed(lost(1, 0, 30), "k", "c1.1", 1, 0), sgrant(2, "B", 11, 20, 25, 1000, 0), a}
	if res := Check(ops, time.Second, ""); len(res.Violations) != 0 {
		t.Fatalf("a retried grant judged from its own call: %v", res.Violations)
	}
	ops[2].TicketCall = time.Time{} // without the first try's call it cannot be placed
	if res := Check(ops, time.Second, ""); len(res.Violations) != 1 {
		t.Fatalf("violations %v, want one", res.Violations)
	}
}
