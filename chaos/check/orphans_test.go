package check

import (
	"testing"
	"time"
)

// held is a sampler reading at ms(at) showing the lock held with fence, granted
// at ms(granted) to owner.
func held(at int, fence int64, owner string, granted int) Sample {
	return Sample{Lock: "l", Sent: ms(at), Got: ms(at + 1), Held: true, Top: true, Fence: fence, Owner: owner,
		GrantedAt: ms(granted), PTTL: time.Second}
}

func free(at int) Sample { return Sample{Lock: "l", Sent: ms(at), Got: ms(at + 1)} }

// hungUp is an acquire by owner hung up at ms(hang) and answered with a 503 at
// ms(ret), on Baton process 0.
func hungUp(owner string, call, hang, ret int) Op {
	return Op{Client: 1, Lock: "l", Kind: Acquire, Owner: owner, Call: ms(call), HungUp: true, HungAt: ms(hang),
		Return: ms(ret), Outcome: Unknown}
}

func TestOrphans(t *testing.T) {
	limit := time.Second
	readings := func(fence int64, owner string, granted int, at ...int) []Sample {
		var ss []Sample
		for _, a := range at {
			ss = append(ss, held(a, fence, owner, granted))
		}
		return ss
	}
	tests := []struct {
		name            string
		ops             []Op
		samples         []Sample
		spans, stalls   []Span
		crashes         []Crash
		unknown         int
		orphans         int
		crashed, gone   int
		wantMaxAgeAbove time.Duration
	}{
		{
			name:    "a hung-up client's hold undone at once",
			ops:     []Op{hungUp("a", 0, 50, 60)},
			samples: append(readings(7, "a", 40, 45, 70), free(120)),
			unknown: 1,
		},
		{
			name:            "a hung-up client's hold kept past the limit",
			ops:             []Op{hungUp("a", 0, 50, 60)},
			samples:         readings(7, "a", 40, 100, 600, 1100, 1200),
			unknown:         1,
			orphans:         1,
			wantMaxAgeAbove: 1100 * time.Millisecond,
		},
		{
			name:    "kept while Redis was out of reach",
			ops:     []Op{hungUp("a", 0, 50, 60)},
			samples: readings(7, "a", 40, 1000, 2000, 3000),
			spans:   []Span{{From: ms(100), To: ms(2900), Redis: true}},
			unknown: 1,
		},
		{
			name:    "a span that only disturbed pub/sub excuses nothing",
			ops:     []Op{hungUp("a", 0, 50, 60)},
			samples: readings(7, "a", 40, 1000, 2000, 3000),
			spans:   []Span{{From: ms(100), To: ms(2900)}},
			unknown: 1,
			orphans: 1,
		},
		{
			name: "a ticket's grant kept for its owner, not polling, for the ticket ttl",
			ops: []Op{
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "t", Ticket: "T", Call: ms(0), Return: ms(5), Outcome: Queued},
				{Client: 1, Lock: "l", Kind: Poll, Owner: "t", Ticket: "T", Call: ms(6), Return: ms(500), Outcome: Queued},
			},
			samples: append(readings(8, "t", 600, 650, 1550, 1590), free(1650)),
			unknown: 1,
		},
		{
			name: "a ticket's grant kept past the ticket ttl",
			ops: []Op{
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "t", Ticket: "T", Call: ms(0), Return: ms(5), Outcome: Queued},
			},
			samples: readings(8, "t", 600, 650, 1800),
			unknown: 1,
			orphans: 1,
		},
		{
			name: "a hold its client was told of",
			ops: []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "k", Lease: "K", Fence: 9, Call: ms(0), Return: ms(5),
				Outcome: OK}},
			samples: readings(9, "k", 3, 4, 100, 5000),
		},
		{
			name: "readings while its owner's request is in flight",
			ops: []Op{
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "w", Call: ms(0), Return: ms(3000), Outcome: Busy},
			},
			samples: readings(9, "w", 100, 200, 2900),
		},
		{
			name:    "left behind by a Baton process killed within the limit",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "c", Server: 1, Call: ms(0), Return: ms(40), Outcome: Unknown}},
			samples: readings(7, "c", 10, 100, 3000),
			crashes: []Crash{{Server: 1, At: ms(30)}},
			unknown: 1,
			crashed: 1,
		},
		{
			name:    "a kill of the other process excuses nothing",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "c", Server: 1, Call: ms(0), Return: ms(40), Outcome: Unknown}},
			samples: readings(7, "c", 10, 100, 3000),
			crashes: []Crash{{Server: 0, At: ms(30)}},
			unknown: 1,
			orphans: 1,
		},
		{
			name: "a grant answered to a client gone long before",
			ops: []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "g", Lease: "G", Fence: 5, Call: ms(0), HungUp: true,
				HungAt: ms(100), AcquiredAt: ms(400), Return: ms(401), Outcome: OK}},
			gone: 1,
		},
		{
			name: "a grant answered late only because the runner stalled",
			ops: []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "g", Lease: "G", Fence: 5, Call: ms(0), HungUp: true,
				HungAt: ms(100), AcquiredAt: ms(400), Return: ms(401), Outcome: OK}},
			stalls: []Span{{From: ms(120), To: ms(390)}},
		},
		{
			name: "a grant made before the hang-up, its answer on the way",
			ops: []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "g", Lease: "G", Fence: 5, Call: ms(0), HungUp: true,
				HungAt: ms(100), AcquiredAt: ms(98), Return: ms(101), Outcome: OK}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Orphans(tt.ops, tt.samples, limit, tt.spans, tt.stalls, tt.crashes)
			if got.Unknown != tt.unknown || len(got.Orphans) != tt.orphans || len(got.Crashed) != tt.crashed ||
				len(got.GrantedGone) != tt.gone {
				t.Fatalf("unknown %d, orphans %v, crashed %v, granted gone %v; want %d, %d, %d, %d",
					got.Unknown, got.Orphans, got.Crashed, got.GrantedGone, tt.unknown, tt.orphans, tt.crashed, tt.gone)
			}
			if got.MaxAge < tt.wantMaxAgeAbove {
				t.Fatalf("max age %v, want above %v", got.MaxAge, tt.wantMaxAgeAbove)
			}
		})
	}
}
