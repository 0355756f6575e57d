package check

import (
	"testing"
	"time"
)

// t0 is an arbitrary start; ms(n) is n milliseconds after it.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// grant is an Acquire answered with a lease of ttl from its return.
func grant(client int, lease string, fence int64, call, ret, ttl int) Op {
	return Op{Client: client, Lock: "l", Kind: Acquire, Lease: lease, TTL: time.Duration(ttl) * time.Millisecond,
		Call: ms(call), Return: ms(ret), Outcome: OK, Fence: fence, Count: 1, ExpiresAt: ms(ret + ttl), AcquiredAt: ms(ret)}
}

func release(client int, lease string, fence int64, call, ret, left int) Op {
	return Op{Client: client, Lock: "l", Kind: Release, Lease: lease, Call: ms(call), Return: ms(ret),
		Outcome: OK, Fence: fence, Count: left, Released: left == 0}
}

func renew(client int, lease string, fence int64, call, ret, ttl int, out Outcome) Op {
	o := Op{Client: client, Lock: "l", Kind: Renew, Lease: lease, TTL: time.Duration(ttl) * time.Millisecond,
		Call: ms(call), Return: ms(ret), Outcome: out}
	if out == OK {
		o.Fence, o.Count, o.ExpiresAt = fence, 1, ms(ret+ttl)
	}
	return o
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		give []Op
		want bool // legal
	}{
		{"grant, renew, release, next grant", []Op{
			grant(1, "A", 10, 0, 5, 1000),
			{Client: 2, Lock: "l", Kind: Acquire, Call: ms(6), Return: ms(8), Outcome: Busy},
			renew(1, "A", 10, 20, 25, 1000, OK),
			release(1, "A", 10, 30, 35, 0),
			grant(2, "B", 11, 40, 45, 1000),
			release(2, "B", 11, 50, 55, 0),
		}, true},
		{"a lease runs out; its renewal is refused; the next grant is legal", []Op{
			grant(1, "A", 10, 0, 5, 100),
			grant(2, "B", 11, 10, 300, 1000), // waited for A's lease to end
			renew(1, "A", 0, 310, 315, 100, NotHeld),
		}, true},
		{"a release of unknown outcome may have freed the lock", []Op{
			grant(1, "A", 10, 0, 5, 10000),
			{Client: 1, Lock: "l", Kind: Release, Lease: "A", Call: ms(10), Return: ms(2000), Outcome: Unknown},
			grant(2, "B", 11, 20, 30, 1000),
		}, true},
		{"Redis lost its data: the holder vanished, fences go on", []Op{
			grant(1, "A", 10, 0, 5, 10000),
			{Kind: Loss, Call: ms(100), Return: ms(200), Outcome: OK},
			grant(2, "B", 5000, 210, 215, 1000),
			renew(1, "A", 0, 220, 225, 1000, NotHeld),
		}, true},
		{"a ticket granted while its waiter was away", []Op{
			grant(1, "A", 10, 0, 5, 10000),
			release(1, "A", 10, 100, 105, 0),
			{Client: 2, Lock: "l", Kind: Poll, Lease: "T", Ticket: "t", TicketCall: ms(1), Call: ms(500), Return: ms(505),
				Outcome: OK, Fence: 11, Count: 1, ExpiresAt: ms(1500), AcquiredAt: ms(103)},
		}, true},
		{"two overlapping grants", []Op{
			grant(1, "A", 10, 0, 5, 1000),
			grant(2, "B", 11, 100, 105, 1000),
		}, false},
		{"a fence going down", []Op{
			grant(1, "A", 10, 0, 5, 1000),
			release(1, "A", 10, 10, 15, 0),
			grant(2, "B", 9, 20, 25, 1000),
		}, false},
		{"a renewal of a lease that certainly ran out", []Op{
			grant(1, "A", 10, 0, 5, 100),
			renew(1, "A", 10, 400, 405, 100, OK),
		}, false},
		{"a 404 for a live lease", []Op{
			grant(1, "A", 10, 0, 5, 1000),
			renew(1, "A", 0, 100, 105, 1000, NotHeld),
		}, false},
		{"holds survive a restart that kept the data", []Op{
			grant(1, "A", 10, 0, 5, 10000),
			grant(2, "B", 5000, 210, 215, 1000), // no Loss: A still holds
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
			if !tt.want && len(res.Violations[0].Excerpt) < 3 {
				t.Fatalf("excerpt %q, want the order and the operations that do not fit", res.Violations[0].Excerpt)
			}
		})
	}
}

func TestResource(t *testing.T) {
	a := Writer{Lease: "A", Fence: 10, GrantFrom: ms(0), GrantTo: ms(5)}
	b := Writer{Lease: "B", Fence: 11, GrantFrom: ms(100), GrantTo: ms(105)}
	tests := []struct {
		name                 string
		give                 []Writer
		want                 []bool // accepted
		accepted, stale, rej int
	}{
		{"in order; a zombie turned away", []Writer{a, a, b, a}, []bool{true, true, true, false}, 3, 0, 1},
		{"a zombie whose fence beats the next holder's", // fences out of order, as without the time floor after a data loss
			[]Writer{{Lease: "Z", Fence: 12, GrantFrom: ms(0), GrantTo: ms(5)}, b, {Lease: "Z", Fence: 12, GrantFrom: ms(0), GrantTo: ms(5)}},
			[]bool{true, false, true}, 2, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Resource
			for i, w := range tt.give {
				if got := r.Write(w); got != tt.want[i] {
					t.Fatalf("write %d (%s, fence %d): accepted %v, want %v", i, w.Lease, w.Fence, got, tt.want[i])
				}
			}
			acc, stale, rej := r.Counts()
			if acc != tt.accepted || stale != tt.stale || rej != tt.rej {
				t.Fatalf("accepted %d stale %d rejected %d, want %d %d %d", acc, stale, rej, tt.accepted, tt.stale, tt.rej)
			}
			s := r.Samples()
			if len(s) != tt.stale {
				t.Fatalf("samples %+v, want %d", s, tt.stale)
			}
			if len(s) > 0 && (s[0].Writer.Lease != "Z" || s[0].Newer.Lease != "B") {
				t.Fatalf("sample %+v, want Z's write after B's", s[0])
			}
		})
	}
}
