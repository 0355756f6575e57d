package check

import (
	"testing"
	"time"
)

// watch is a watch of fence called at ms(call) that returned at ms(ret).
func watch(fence int64, call, ret int) Op {
	return Op{Client: 9, Lock: "l", Kind: Watch, Fence: fence, Wait: time.Second, Call: ms(call), Return: ms(ret), Outcome: OK}
}

func TestWatches(t *testing.T) {
	bound := WatchBound + 25*time.Millisecond
	a := grant(1, "A", 10, 0, 5, 500) // A's lease ends at ms(505)
	tests := []struct {
		name          string
		ops           []Op
		samples       []Sample
		spans, stalls []Span
		judged        int
		late          int
		stalled       int
		excused       int
		wantMaxLag    time.Duration
	}{
		{
			name:       "a release seen at once",
			ops:        []Op{a, release(1, "A", 10, 100, 105, 0), watch(10, 20, 110)},
			judged:     1,
			wantMaxLag: 5 * time.Millisecond,
		},
		{
			name:   "an expiry slept through until the next holder",
			ops:    []Op{a, grant(2, "B", 11, 10, 800, 1000), watch(10, 20, 802)},
			judged: 1, late: 1,
		},
		{
			name:   "an expiry seen at once",
			ops:    []Op{a, watch(10, 20, 520)},
			judged: 1,
		},
		{
			name:   "a renewal of unknown outcome leaves the lease's end unknown",
			ops:    []Op{a, renew(1, "A", 10, 100, 900, 500, Unknown), watch(10, 20, 700)},
			judged: 0,
		},
		{
			name:    "a change only the sampler saw",
			ops:     []Op{a, renew(1, "A", 10, 100, 900, 500, Unknown), watch(10, 20, 700)},
			samples: []Sample{held(300, 10, "a", 5), free(400)},
			judged:  1, late: 1,
		},
		{
			name:    "a change during a fault",
			ops:     []Op{a, grant(2, "B", 11, 10, 800, 1000), watch(10, 20, 802)},
			spans:   []Span{{From: ms(480), To: ms(600)}},
			excused: 1,
		},
		{
			name:   "a fault that concerned another Baton process excuses nothing",
			ops:    []Op{a, grant(2, "B", 11, 10, 800, 1000), watch(10, 20, 802)},
			spans:  []Span{{From: ms(480), To: ms(600), Server: 2}},
			judged: 1, late: 1,
		},
		{
			name:    "late only by the runner's own stall",
			ops:     []Op{a, grant(2, "B", 11, 10, 800, 1000), watch(10, 20, 802)},
			stalls:  []Span{{From: ms(520), To: ms(790)}},
			judged:  1,
			stalled: 1,
		},
		{
			name:   "a watch that ran its wait out before the change",
			ops:    []Op{grant(1, "A", 10, 0, 5, 5000), watch(10, 20, 1020)},
			judged: 0,
		},
		{
			name: "a shared hold beside the watched one, ended before the call",
			ops: []Op{sgrant(1, "A", 10, 0, 5, 5000, 0), sgrant(2, "B", 11, 10, 15, 5000, 0),
				release(2, "B", 11, 20, 25, 0), watch(10, 30, 1030)},
			judged: 0,
		},
		{
			name: "a shared hold granted beside the watched one while it waits",
			ops: []Op{sgrant(1, "A", 10, 0, 5, 5000, 0), watch(10, 30, 300),
				sgrant(2, "B", 11, 100, 105, 5000, 0)},
			judged: 1, late: 1,
		},
		{
			name:   "a change before the call: the watch answers at once",
			ops:    []Op{a, release(1, "A", 10, 10, 15, 0), watch(10, 20, 200)},
			judged: 1, late: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Watches(tt.ops, tt.samples, bound, tt.spans, tt.stalls)
			if got.Judged != tt.judged || len(got.Late) != tt.late || got.Stalled != tt.stalled || got.Excused != tt.excused {
				t.Fatalf("judged %d, late %v, stalled %d, excused %d; want %d, %d, %d, %d",
					got.Judged, got.Late, got.Stalled, got.Excused, tt.judged, tt.late, tt.stalled, tt.excused)
			}
			if tt.wantMaxLag > 0 && got.Quantile(1) != tt.wantMaxLag {
				t.Fatalf("max lag %v, want %v", got.Quantile(1), tt.wantMaxLag)
			}
		})
	}
}
