package store

import (
	"testing"
	"time"
)

func TestAClockSampleTakenWhileBusyKeepsTheTighterEstimate(t *testing.T) {
	now := time.Now()
	good := &clockSample{offset: 40 * time.Millisecond, err: time.Millisecond, at: now.Add(-time.Second)}
	for _, c := range []struct {
		name string
		next *clockSample
		want bool
	}{
		{"tighter", &clockSample{offset: 41 * time.Millisecond, err: 100 * time.Microsecond, at: now}, true},
		{"wider, agreeing", &clockSample{offset: 200 * time.Millisecond, err: 300 * time.Millisecond, at: now}, false},
		{"wider, the clock stepped ahead", &clockSample{offset: 2 * time.Second, err: 300 * time.Millisecond, at: now}, true},
		{"wider, the clock stepped back", &clockSample{offset: -2 * time.Second, err: 300 * time.Millisecond, at: now}, true},
	} {
		if got := c.next.replaces(good, now); got != c.want {
			t.Errorf("%s: replaces %v, want %v", c.name, got, c.want)
		}
	}
}
