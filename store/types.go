package store

import "time"

// Lease is a granted hold on a lock: exclusive, or one of its shared holds.
type Lease struct {
	Name       string
	ID         string // the bearer secret; never logged, never stored in Redis
	Fence      int64
	Count      int
	TTL        time.Duration // remaining, by the Redis server's clock
	ExpiresAt  time.Time
	Owner      string
	AcquiredAt time.Time
	Shared     bool
	Limit      int // a shared hold's limit; 0 for none

	replayed bool // a re-entry with an Idempotency-Key answered again
}

// Replayed reports a re-entry answered again for its Idempotency-Key.
func (l *Lease) Replayed() bool { return l != nil && l.replayed }

// Ticket is a place in a lock's fair queue.
type Ticket struct {
	Name      string
	ID        string // the bearer secret; never logged, never stored in Redis
	Position  int    // 1 means next
	TicketTTL time.Duration
}

// Lock modes, as State.Mode reports them.
const (
	ModeFree      = "free"
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// State is a lock as anyone may see it: never a lease id.
type State struct {
	Name      string
	Mode      string // ModeFree, ModeExclusive or ModeShared
	Held      bool   // Holders > 0
	Holders   int
	Limit     int // shared with a limit: the limit; else 0
	Owner     string
	Count     int
	Fence     int64         // the highest fence among the holds, or the last fence issued when free
	TTL       time.Duration // the longest remaining
	ExpiresAt time.Time     // zero when not held
	Waiters   int
	Holds     []Hold // at most MaxListedHolds
}

// MaxListedHolds is how many holds State lists at most.
const MaxListedHolds = 100

// Hold is one hold in a lock's State.
type Hold struct {
	Owner     string
	Fence     int64
	Count     int
	TTL       time.Duration
	ExpiresAt time.Time
	Shared    bool
}

// AcquireRequest asks for a lock. With Lease set it re-enters that lease.
type AcquireRequest struct {
	Name   string
	TTL    time.Duration
	Wait   time.Duration
	Fair   bool
	Owner  string
	Lease  string
	Shared bool // a shared hold
	Limit  int  // with Shared: the most shared holds at once; 0 for none
	// ModeGiven says a re-entry named its mode (Shared): it must match the hold's.
	ModeGiven bool
	By        string // the principal asking (Principal.ID); holds and tickets are bound to it

	// IdemKey is the request's Idempotency-Key, BodyHash its body's hash: a
	// retry with the key gets what the first request made.
	IdemKey, BodyHash string
	// Session is a session id: the hold joins that session and lasts as long.
	Session string
	// Caps are the principal's caps on live objects (caps.go): a new hold, or
	// with Fair a ticket, past them is refused with a *CapError. Zero: none,
	// and no Redis command for them.
	Caps Caps
}

// Ref names a lease or a ticket of a lock, as asked for by a principal.
type Ref struct {
	Name string
	ID   string // the lease or ticket id
	By   string // the principal asking: only the one that made it may use it
	// Caps are the principal's caps (caps.go): a renewal, release, cancel or
	// poll keeps the count of the kinds they cap up to date. Zero: none.
	Caps Caps
}

// AcquireResult is one of: a new Lease, a re-entered Lease, or a Ticket.
type AcquireResult struct {
	Lease     *Lease
	Reentered bool
	Ticket    *Ticket
	Replayed  bool // what an earlier request with the same Idempotency-Key made
}

// Release is the outcome of releasing one hold.
type Release struct {
	Name     string
	Count    int  // holds left
	Released bool // the hold ended: the lock (or a slot of it) was freed or handed on
}

// PollResult is one of: the Lease granted to a ticket, or the Ticket still waiting.
type PollResult struct {
	Lease  *Lease
	Ticket *Ticket

	holderTTL time.Duration // time until the soonest hold ends while the ticket waits
	replayed  bool          // a fair acquire's Idempotency-Key replayed
}
