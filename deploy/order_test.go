package deploy

import (
	"fmt"
	"testing"
	"time"
)

// grant is one grant a client received, as the client saw it.
type grant struct {
	who    string
	sent   time.Time // the acquire request that led to it was sent
	queued time.Time // its ticket was in the queue (the 202 arrived); zero if granted at once
	got    time.Time // the lease arrived
	fence  int64
}

// orderViolations checks queue order on one lock from the clients' side: once
// a ticket's 202 has arrived, the ticket is in the queue, and every request
// sent after that (fair or not) must be granted after it, so with a higher
// fence. It holds because every ticket here is kept alive by its owner's
// polls until granted. Requests sent while a ticket was being queued may go
// either way, so they are not judged, nor are those sent after the ticket's
// lease arrived (fences grow: the resource checks that). judged counts the
// pairs that were: a request made while a ticket queued before it waited.
func orderViolations(lock string, gs []grant) (bad []string, judged int) {
	for _, a := range gs {
		if a.queued.IsZero() {
			continue
		}
		for _, g := range gs {
			if !g.sent.After(a.queued) || !g.sent.Before(a.got) {
				continue
			}
			judged++
			if g.fence < a.fence {
				bad = append(bad, fmt.Sprintf("%s: %s (fence %d) sent %s was granted before %s (fence %d), queued at %s",
					lock, g.who, g.fence, g.sent.Format("15:04:05.000000"), a.who, a.fence, a.queued.Format("15:04:05.000000")))
			}
		}
	}
	return bad, judged
}

func TestOrderViolations(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		give []grant
		want int
	}{
		{name: "granted in queue order", want: 0, give: []grant{
			{who: "a", sent: at(0), queued: at(1), got: at(5), fence: 10},
			{who: "b", sent: at(2), queued: at(3), got: at(7), fence: 11},
			{who: "c", sent: at(4), got: at(8), fence: 12}, // granted at once, after both
		}},
		{name: "a later ticket granted first", want: 1, give: []grant{
			{who: "a", sent: at(0), queued: at(1), got: at(9), fence: 11},
			{who: "b", sent: at(2), queued: at(3), got: at(4), fence: 10},
		}},
		{name: "a later plain acquire jumps the queue", want: 1, give: []grant{
			{who: "a", sent: at(0), queued: at(1), got: at(9), fence: 11},
			{who: "p", sent: at(5), got: at(6), fence: 10},
		}},
		{name: "sent while the ticket was being queued: either order", want: 0, give: []grant{
			{who: "a", sent: at(0), queued: at(3), got: at(9), fence: 11},
			{who: "b", sent: at(1), queued: at(4), got: at(5), fence: 10},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := orderViolations("l", tt.give); len(got) != tt.want {
				t.Errorf("got %d violations %q, want %d", len(got), got, tt.want)
			}
		})
	}
}
