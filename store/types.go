package store

import "time"

// Lease is a granted hold on a lock.
type Lease struct {
	Name       string
	ID         string // the bearer secret; never logged, never stored in Redis
	Fence      int64
	Count      int
	TTL        time.Duration // remaining, by the Redis server's clock
	ExpiresAt  time.Time
	Owner      string
	AcquiredAt time.Time
}

// Ticket is a place in a lock's fair queue.
type Ticket struct {
	Name      string
	ID        string // the bearer secret; never logged, never stored in Redis
	Position  int    // 1 means next
	TicketTTL time.Duration
}

// State is a lock as anyone may see it: never a lease id.
type State struct {
	Name      string
	Held      bool
	Owner     string
	Count     int
	Fence     int64 // the holder's fence, or the last fence issued when free
	TTL       time.Duration
	ExpiresAt time.Time // zero when not held
	Waiters   int
}

// AcquireRequest asks for a lock. With Lease set it re-enters that lease.
type AcquireRequest struct {
	Name  string
	TTL   time.Duration
	Wait  time.Duration
	Fair  bool
	Owner string
	Lease string
}

// AcquireResult is one of: a new Lease, a re-entered Lease, or a Ticket.
type AcquireResult struct {
	Lease     *Lease
	Reentered bool
	Ticket    *Ticket
}

// Release is the outcome of releasing one hold.
type Release struct {
	Name     string
	Count    int  // holds left
	Released bool // the lock was freed or handed to the next queued waiter
}

// PollResult is one of: the Lease granted to a ticket, or the Ticket still waiting.
type PollResult struct {
	Lease  *Lease
	Ticket *Ticket

	holderTTL time.Duration // the lock's remaining lease while the ticket waits
}
