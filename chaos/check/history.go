// Package check records what clients of Baton did and saw, and checks it: each
// lock's history against a porcupine model of a fenced, reentrant lock with
// leases that expire and shared holds (read-write locks, semaphores), and every
// exclusive holder's writes against a fenced resource.
//
// Times are wall-clock readings (time.Now) of the test process. Redis keeps lease
// time on the same machine's wall clock (PEXPIRE, TIME), so a lease's expires_at
// and the calls' times can be compared, within Slack.
package check

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what an operation asked for.
type Kind uint8

const (
	// Acquire is a POST of a new lease (fair or not); with Outcome OK it granted one.
	Acquire Kind = iota
	// Poll is a ticket's long-poll; with Outcome OK it returned the ticket's lease.
	Poll
	// Reenter is a POST with the lease of a hold: count + 1, the lease renewed.
	Reenter
	// Renew is a PATCH of the lease.
	Renew
	// Release is a DELETE of one hold.
	Release
	// Get is a GET of the lease.
	Get
	// Cancel is a DELETE of a ticket.
	Cancel
	// Loss is not a request: Redis lost its data (killed and restarted without
	// persistence, or a failover that lost writes) at some moment between Call
	// and Return. Every hold may vanish there; fences must still increase. A
	// Loss with a Lock concerns that lock alone (a cluster shard's locks); one
	// without, every lock.
	Loss
	// Watch is a GET of the lock's state with wait_ms and fence: it must return
	// soon after the lock stops being held with Fence (Watches). The model
	// ignores it.
	Watch
)

var kindNames = [...]string{"acquire", "poll", "reenter", "renew", "release", "get", "cancel", "loss", "watch"}

func (k Kind) String() string { return kindNames[k] }

// Outcome is what an operation's answer says about its effect.
type Outcome uint8

const (
	// OK is a success: a lease granted, re-entered, renewed, released or read.
	OK Outcome = iota
	// NotHeld is a 404 lease-not-held.
	NotHeld
	// Busy is a 423 lock-held: nothing happened.
	Busy
	// Queued is a 202: a ticket created, or still waiting.
	Queued
	// Gone is a 410 ticket-gone.
	Gone
	// Unknown is a timeout, a 5xx, a 429 or a transport error: the operation may or
	// may not have taken effect, at any moment after its call.
	Unknown
	// Invalid is a 400 or an answer outside the contract: a bug in the workload or
	// the server, reported as such.
	Invalid
	// Used is a 409 idempotency-key-used: an earlier request with the same
	// Idempotency-Key made a hold or a ticket that has ended since.
	Used
)

var outcomeNames = [...]string{"ok", "not-held", "busy", "queued", "gone", "unknown", "invalid", "key-used"}

func (o Outcome) String() string { return outcomeNames[o] }

// Op is one operation of a history.
type Op struct {
	Client int
	Lock   string
	Kind   Kind
	Lease  string        // the lease the operation names, or the one it was granted
	Ticket string        // Poll and Cancel: the ticket; a fair Acquire: the ticket it got
	TTL    time.Duration // the ttl asked for (Acquire, Reenter, Renew)
	// Shared is, for an Acquire, whether it asked for a shared hold, under
	// Limit (0: none); for a lease answer, the hold's mode as answered.
	Shared bool
	Limit  int
	// IdemKey is the Idempotency-Key an Acquire carried ("" for none); Try
	// numbers the tries of one key from 1; Replayed marks an answer that said
	// Idempotent-Replayed.
	IdemKey  string
	Try      int
	Replayed bool
	Wait     time.Duration // the wait asked for (Watch)
	Call     time.Time
	Return   time.Time
	Outcome  Outcome
	// Lost marks an Unknown outcome whose answer was lost: a transport error
	// or a 5xx, its client still there (not a 429, not a hang-up).
	Lost bool

	// Owner is the owner label an Acquire sent, unique to the request; a Poll or
	// Cancel carries its ticket's. A hold in Redis names its request by it
	// (Orphans).
	Owner string
	// Server is the Baton process (its index) the request went to; -1 for none.
	Server int
	// HungUp marks a request whose client hung up (at HungAt) before any answer
	// came: the client would never see one. The runner still reads what the
	// server answered (a half-closed connection), and Outcome says what that was.
	HungUp bool
	HungAt time.Time

	// From the answer, when Outcome is OK.
	Fence      int64
	Count      int
	Released   bool      // Release: the count reached 0
	ExpiresAt  time.Time // lease answers: when the lease runs out, by the Redis clock
	AcquiredAt time.Time // lease answers: when it was granted, by the Redis clock

	// TicketCall is, for a Poll, when the ticket was asked for: a grant to the
	// ticket can have happened at any moment since. For a retried Acquire (Try
	// above 1), when the key's first try was called: the grant the retry
	// answers with may have been made by any try.
	TicketCall time.Time
	Detail     string // the error, for the log
}

func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c%-3d %-7s %-8s", o.Client, o.Kind, o.Outcome)
	if o.HungUp {
		fmt.Fprintf(&b, " hung-up@%s", clock(o.HungAt))
	}
	if o.Server >= 0 && o.Kind != Loss {
		fmt.Fprintf(&b, " @%d", o.Server)
	}
	if o.Owner != "" {
		fmt.Fprintf(&b, " owner=%s", o.Owner)
	}
	if o.Shared {
		fmt.Fprintf(&b, " shared limit=%d", o.Limit)
	}
	if o.IdemKey != "" {
		fmt.Fprintf(&b, " key=%s try=%d", short(o.IdemKey), o.Try)
		if o.Replayed {
			b.WriteString(" replayed")
		}
	}
	if o.Lease != "" {
		fmt.Fprintf(&b, " lease=%s", short(o.Lease))
	}
	if o.Ticket != "" {
		fmt.Fprintf(&b, " ticket=%s", short(o.Ticket))
	}
	if o.Kind == Watch {
		fmt.Fprintf(&b, " fence=%d wait=%v", o.Fence, o.Wait)
	}
	if o.Outcome == OK && o.Kind != Loss && o.Kind != Cancel && o.Kind != Watch {
		fmt.Fprintf(&b, " fence=%d count=%d", o.Fence, o.Count)
		if o.Kind == Release {
			fmt.Fprintf(&b, " released=%v", o.Released)
		} else {
			fmt.Fprintf(&b, " expires=%s", clock(o.ExpiresAt))
		}
	}
	if o.TTL > 0 {
		fmt.Fprintf(&b, " ttl=%v", o.TTL)
	}
	fmt.Fprintf(&b, " [%s, %s]", clock(o.Call), clock(o.Return))
	if o.Detail != "" {
		fmt.Fprintf(&b, " (%s)", o.Detail)
	}
	return b.String()
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000000")
}

// Recorder collects operations from many goroutines.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Add records one operation.
func (r *Recorder) Add(o Op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// Ops returns the operations recorded so far, by call time.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	ops := append([]Op(nil), r.ops...)
	r.mu.Unlock()
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call.Before(ops[j].Call) })
	return ops
}
