package check

import (
	"testing"
	"time"
)

// sgrant is an Acquire answered with a shared lease of ttl from its return,
// under limit (0: none).
func sgrant(client int, lease string, fence int64, call, ret, ttl, limit int) Op {
	o := grant(client, lease, fence, call, ret, ttl)
	o.Shared, o.Limit = true, limit
	return o
}

// srenew is a renewal of a shared lease answered OK, to ttl from its return.
func srenew(client int, lease string, fence int64, call, ret, ttl int) Op {
	o := renew(client, lease, fence, call, ret, ttl, OK)
	o.Shared = true
	return o
}

// sreenter re-enters a shared lease: count after, the lease renewed to ttl.
func sreenter(client int, lease string, fence int64, call, ret, ttl, count int) Op {
	return Op{Client: client, Lock: "l", Kind: Reenter, Lease: lease, TTL: time.Duration(ttl) * time.Millisecond,
		Call: ms(call), Return: ms(ret), Outcome: OK, Fence: fence, Count: count, Shared: true, ExpiresAt: ms(ret + ttl)}
}

func TestCheckShared(t *testing.T) {
	tests := []struct {
		name string
		give []Op
		want bool // legal
	}{
		{"two readers, renewed and released, then a writer", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 2),
			sgrant(2, "B", 11, 10, 15, 1000, 2),
			srenew(1, "A", 10, 20, 25, 1000),
			sreenter(2, "B", 11, 30, 35, 1000, 2),
			release(1, "A", 10, 40, 45, 0),
			release(2, "B", 11, 50, 55, 1),
			release(2, "B", 11, 60, 65, 0),
			grant(3, "C", 12, 70, 75, 1000),
		}, true},
		{"unbounded readers", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 0),
			sgrant(2, "B", 11, 10, 15, 1000, 0),
			sgrant(3, "C", 12, 20, 25, 1000, 0),
			sgrant(4, "D", 13, 30, 35, 1000, 0),
		}, true},
		{"a permit freed by expiry goes to the next", []Op{
			sgrant(1, "A", 10, 0, 5, 100, 1),
			sgrant(2, "B", 11, 10, 300, 1000, 1), // waited for A's lease to end
			renew(1, "A", 0, 310, 315, 100, NotHeld),
		}, true},
		{"a reader's release of unknown outcome may have let the writer in", []Op{
			sgrant(1, "A", 10, 0, 5, 10000, 0),
			{Client: 1, Lock: "l", Kind: Release, Lease: "A", Call: ms(10), Return: ms(2000), Outcome: Unknown},
			grant(2, "W", 11, 20, 30, 1000),
		}, true},
		{"a grant that needs a permit ends the hold that was not renewed", []Op{
			sgrant(1, "A", 10, 0, 5, 300, 2),
			sgrant(2, "B", 11, 0, 6, 300, 2),
			sgrant(3, "C", 12, 270, 300, 1000, 2), // A or B has run out
			srenew(1, "A", 10, 301, 310, 1000),    // so it was B
		}, true},
		{"a writer beside a reader", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 0),
			grant(2, "W", 11, 100, 105, 1000),
		}, false},
		{"a reader beside a writer", []Op{
			grant(1, "W", 10, 0, 5, 1000),
			sgrant(2, "A", 11, 100, 105, 1000, 0),
		}, false},
		{"a third holder within a limit of two", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 2),
			sgrant(2, "B", 11, 10, 15, 1000, 2),
			sgrant(3, "C", 12, 20, 25, 1000, 2),
		}, false},
		{"a shared grant's fence going down", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 0),
			sgrant(2, "B", 9, 10, 15, 1000, 0),
		}, false},
		{"a shared grant under another limit beside live holds", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 3),
			sgrant(2, "B", 11, 10, 15, 1000, 2),
		}, false},
		{"a shared hold renewed as an exclusive one", []Op{
			sgrant(1, "A", 10, 0, 5, 1000, 0),
			renew(1, "A", 10, 20, 25, 1000, OK),
		}, false},
		{"both holds kept after a grant that needed one of them to end", []Op{
			sgrant(1, "A", 10, 0, 5, 300, 2),
			sgrant(2, "B", 11, 0, 6, 300, 2),
			sgrant(3, "C", 12, 270, 300, 1000, 2),
			srenew(1, "A", 10, 301, 310, 1000),
			srenew(2, "B", 11, 302, 311, 1000),
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Check(tt.give, time.Second, "")
			if len(res.Inconclusive) > 0 {
				t.Fatalf("inconclusive: %v", res.Inconclusive)
			}
			if got := len(res.Violations) == 0; got != tt.want {
				t.Fatalf("legal %v, want %v; violations: %v", got, tt.want, res.Violations)
			}
		})
	}
}

// A Loss of one lock frees that lock only.
func TestCheckLossOfOneLock(t *testing.T) {
	other := func(o Op) Op { o.Lock = "m"; return o }
	ops := []Op{
		grant(1, "A", 10, 0, 5, 10000),
		other(grant(2, "B", 20, 0, 5, 10000)),
		{Kind: Loss, Lock: "l", Call: ms(100), Return: ms(200), Outcome: OK},
		grant(3, "C", 5000, 210, 215, 1000),
		other(grant(4, "D", 5001, 210, 215, 1000)), // B still holds m
	}
	res := Check(ops, time.Second, "")
	if len(res.Violations) != 1 || res.Violations[0].Lock != "m" {
		t.Fatalf("violations %v, want one, of lock m", res.Violations)
	}
}
