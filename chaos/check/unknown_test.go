package check

import (
	"testing"
	"time"
)

func TestUnknownHolds(t *testing.T) {
	limit := 3 * time.Second
	readings := func(fence int64, owner string, granted int, at ...int) []Sample {
		var ss []Sample
		for _, a := range at {
			ss = append(ss, held(a, fence, owner, granted))
		}
		return ss
	}
	granted := func(owner string, fence int64, call, ret int) Op {
		return Op{Client: 1, Lock: "l", Kind: Acquire, Owner: owner, Lease: owner, Fence: fence, Call: ms(call),
			Return: ms(ret), Outcome: OK}
	}
	tests := []struct {
		name    string
		ops     []Op
		samples []Sample
		spans   []Span
		crashes []Crash
		holds   int
		over    int
		crashed int
		max     time.Duration
	}{
		{
			name:    "a grant answered at once",
			ops:     []Op{granted("a", 7, 0, 10)},
			samples: readings(7, "a", 5, 50, 100, 5000),
		},
		{
			name:    "a late copy's grant, undone within the window",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "a", Call: ms(0), Return: ms(10), Outcome: Busy}},
			samples: append(readings(7, "a", 1000, 1010, 2000, 2900), free(2950)),
			holds:   1,
			max:     1900 * time.Millisecond,
		},
		{
			name: "a late copy's grant nobody is ever told of, kept its whole ttl",
			ops: []Op{
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "k", IdemKey: "K", Try: 1, Call: ms(0), Return: ms(10), Outcome: Unknown, Lost: true},
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "k", IdemKey: "K", Try: 2, Call: ms(100), Return: ms(110), Outcome: Busy},
			},
			samples: readings(7, "k", 500, 550, 3000, 6400),
			holds:   1,
			over:    1,
			max:     5900 * time.Millisecond,
		},
		{
			name: "a late copy's grant a retry replays after a while",
			ops: []Op{
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "k", IdemKey: "K", Try: 1, Call: ms(0), Return: ms(10), Outcome: Unknown, Lost: true},
				{Client: 1, Lock: "l", Kind: Acquire, Owner: "k", IdemKey: "K", Try: 2, Lease: "k", Fence: 7, Call: ms(4000),
					Return: ms(4010), Outcome: OK, Replayed: true},
			},
			samples: readings(7, "k", 500, 550, 3900, 4100, 6000),
			holds:   1,
			over:    1,
			max:     3400 * time.Millisecond,
		},
		{
			name: "answered only to a client that had hung up",
			ops: []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "g", Lease: "g", Fence: 5, Call: ms(0), HungUp: true,
				HungAt: ms(5), Return: ms(10), Outcome: OK}},
			samples: readings(5, "g", 8, 50, 4000),
			holds:   1,
			over:    1,
		},
		{
			name:    "kept while Redis was out of reach",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "a", Call: ms(0), Return: ms(2000), Outcome: Unknown, Lost: true}},
			samples: readings(7, "a", 100, 200, 4000),
			spans:   []Span{{From: ms(50), To: ms(3500), Redis: true}},
			holds:   1,
			max:     500 * time.Millisecond,
		},
		{
			name:    "a span that left Redis in reach excuses nothing",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "a", Call: ms(0), Return: ms(2000), Outcome: Unknown, Lost: true}},
			samples: readings(7, "a", 100, 200, 4000),
			spans:   []Span{{From: ms(50), To: ms(3500)}},
			holds:   1,
			over:    1,
		},
		{
			name:    "left behind by a Baton process killed meanwhile",
			ops:     []Op{{Client: 1, Lock: "l", Kind: Acquire, Owner: "c", Server: 1, Call: ms(0), Return: ms(40), Outcome: Unknown, Lost: true}},
			samples: readings(7, "c", 10, 100, 4000),
			crashes: []Crash{{Server: 1, At: ms(30)}},
			holds:   1,
			crashed: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UnknownHolds(tt.ops, tt.samples, limit, tt.spans, tt.crashes)
			if got.Holds != tt.holds || len(got.Over) != tt.over || len(got.Crashed) != tt.crashed {
				t.Fatalf("holds %d, over %v, crashed %v; want %d, %d, %d", got.Holds, got.Over, got.Crashed, tt.holds, tt.over, tt.crashed)
			}
			if tt.max > 0 && (got.Max < tt.max-time.Millisecond || got.Max > tt.max+time.Millisecond) {
				t.Fatalf("max %v, want %v", got.Max, tt.max)
			}
		})
	}
}

func TestLostAnswers(t *testing.T) {
	try := func(key string, n, call int, out Outcome, lost bool) Op {
		return Op{Client: 1, Lock: "l", Kind: Acquire, IdemKey: key, Try: n, Call: ms(call), Return: ms(call + 10),
			Outcome: out, Lost: lost}
	}
	down := []Span{{From: ms(1000), To: ms(2000), Redis: true}, {From: ms(5000), To: ms(6000)}}
	ops := []Op{
		try("settled", 1, 0, Unknown, true), try("settled", 2, 100, Unknown, true), try("settled", 3, 200, Busy, false),
		try("never", 1, 300, Unknown, true), try("never", 2, 400, Unknown, true),
		try("throttled", 1, 500, Unknown, true), try("throttled", 2, 600, Unknown, false), // a 429 settles nothing
		try("in-outage", 1, 1100, Unknown, true),
		try("after-outage", 1, 1200, Unknown, true), try("after-outage", 2, 2100, OK, false),
		try("pubsub-only", 1, 5100, Unknown, true), try("pubsub-only", 2, 5200, Queued, false),
		try("answered", 1, 7000, OK, false),
		try("", 1, 7100, Unknown, true), try("", 1, 1500, Unknown, true), try("", 1, 7200, Busy, false),
		{Client: 1, Lock: "l", Kind: Acquire, IdemKey: "hung", Try: 1, Call: ms(7300), Return: ms(7400), Outcome: Unknown, HungUp: true},
	}
	got := LostAnswers(ops, down)
	if got.Up != 4 || got.UpSettled != 2 || got.Down != 2 || got.DownSettled != 1 || got.Plain != 1 || got.PlainDown != 1 {
		t.Fatalf("got %+v", got)
	}
	if len(got.Unsettled) != 2 || got.Share() != 50 {
		t.Fatalf("unsettled %v, share %v", got.Unsettled, got.Share())
	}
}
