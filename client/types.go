package client

import (
	"encoding/json"
	"fmt"
	"time"
)

// Lease is a granted hold on a lock.
type Lease struct {
	Name       string        // the lock's name
	ID         string        // the lease id, a bearer secret: whoever has it holds the lock
	URL        string        // /v1/locks/{name}/leases/{lease}, relative to the server
	Fence      int64         // the fencing token: strictly increasing per lock over every grant
	Count      int           // the hold count, 1 + re-entries
	TTL        time.Duration // remaining time by the Redis clock; authoritative
	ExpiresAt  time.Time     // when the lease runs out; informational
	Owner      string        // the owner label given at acquisition
	AcquiredAt time.Time     // when the lease was granted
	Shared     bool          // a shared hold (read lock, semaphore permit)
	Limit      int           // a shared hold's limit; 0 for none (and on an exclusive hold)
}

// Ticket is a place in a lock's fair queue. Poll it within TicketTTL, again
// and again, to keep it.
type Ticket struct {
	Name      string        // the lock's name
	ID        string        // the ticket id, a bearer secret
	URL       string        // /v1/locks/{name}/tickets/{ticket}, relative to the server
	Position  int           // place in the queue; 1 means next
	TicketTTL time.Duration // how long the ticket lives without a poll
}

// LockState is a lock's public state; it never holds a lease id. With several
// (shared) holds, Fence is the highest fence among them, Owner and Count those
// of that hold, and TTL and ExpiresAt the longest remaining.
type LockState struct {
	Name      string
	Held      bool
	Owner     string        // the holder's owner label; empty when not held
	Count     int           // the holder's hold count; 0 when not held
	Fence     int64         // the holder's fence, or the last one issued; 0 if none is known
	TTL       time.Duration // the holder's remaining time; 0 when not held
	ExpiresAt time.Time     // when the holder's lease runs out; zero when not held
	Waiters   int           // live tickets in the fair queue
	Mode      string        // "free", "exclusive" or "shared"
	Holders   int           // the number of holds
	Limit     int           // the shared holds' limit; 0 for none
	Holds     []HoldInfo    // the holds (at most 100), soonest to end first
	Raw       []byte        // the body as the server sent it
}

// HoldInfo is one hold as a lock's state shows it, without its lease id.
type HoldInfo struct {
	Owner     string
	Fence     int64
	Count     int
	TTL       time.Duration
	ExpiresAt time.Time
	Shared    bool
}

// Released is the outcome of releasing one hold.
type Released struct {
	Name     string
	Count    int  // holds left on the lease
	Released bool // the count reached 0 and the lock was freed or handed on
}

// AcquireResult is the outcome of Acquire: exactly one of Lease and Ticket is set.
type AcquireResult struct {
	Lease     *Lease  // granted (201) or re-entered (200)
	Reentered bool    // Lease is an existing lease re-entered, with its fence unchanged
	Ticket    *Ticket // not granted within the wait and Fair was set (202): queued

	Replayed bool // the server answered with what an earlier request with the same Idempotency-Key made
}

// PollResult is the outcome of Poll: exactly one of Lease and Ticket is set.
type PollResult struct {
	Lease  *Lease  // the ticket was granted (200)
	Ticket *Ticket // still queued (202), with its current position
}

// Wire forms of the bodies, as api/openapi.yaml describes them. time.Time
// reads RFC 3339 and leaves a JSON null as the zero time.

type leaseJSON struct {
	Name       string    `json:"name"`
	Lease      string    `json:"lease"`
	URL        string    `json:"url"`
	Fence      int64     `json:"fence"`
	Count      int       `json:"count"`
	TTLms      int64     `json:"ttl_ms"`
	ExpiresAt  time.Time `json:"expires_at"`
	Owner      string    `json:"owner"`
	AcquiredAt time.Time `json:"acquired_at"`
	Shared     bool      `json:"shared"`
	Limit      *int      `json:"limit"`
}

type ticketJSON struct {
	Name        string `json:"name"`
	Ticket      string `json:"ticket"`
	URL         string `json:"url"`
	Position    int    `json:"position"`
	TicketTTLms int64  `json:"ticket_ttl_ms"`
}

type stateJSON struct {
	Name      string    `json:"name"`
	Held      bool      `json:"held"`
	Owner     string    `json:"owner"`
	Count     int       `json:"count"`
	Fence     int64     `json:"fence"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
	Waiters   int       `json:"waiters"`
	Mode      string    `json:"mode"`
	Holders   int       `json:"holders"`
	Limit     *int      `json:"limit"`
	Holds     []struct {
		Owner     string    `json:"owner"`
		Fence     int64     `json:"fence"`
		Count     int       `json:"count"`
		TTLms     int64     `json:"ttl_ms"`
		ExpiresAt time.Time `json:"expires_at"`
		Shared    bool      `json:"shared"`
	} `json:"holds"`
}

type releasedJSON struct {
	Name     string `json:"name"`
	Count    int    `json:"count"`
	Released bool   `json:"released"`
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// decodeLease reads a Lease body; a malformed one is ErrUnexpectedResponse.
func decodeLease(body []byte) (*Lease, error) {
	var v leaseJSON
	if err := unmarshal(body, &v); err != nil {
		return nil, err
	}
	return &Lease{Name: v.Name, ID: v.Lease, URL: v.URL, Fence: v.Fence, Count: v.Count, TTL: ms(v.TTLms),
		ExpiresAt: v.ExpiresAt, Owner: v.Owner, AcquiredAt: v.AcquiredAt, Shared: v.Shared, Limit: deref(v.Limit)}, nil
}

// decodeTicket reads a Ticket body; a malformed one is ErrUnexpectedResponse.
func decodeTicket(body []byte) (*Ticket, error) {
	var v ticketJSON
	if err := unmarshal(body, &v); err != nil {
		return nil, err
	}
	return &Ticket{Name: v.Name, ID: v.Ticket, URL: v.URL, Position: v.Position, TicketTTL: ms(v.TicketTTLms)}, nil
}

// decodeState reads a LockState body; a malformed one is ErrUnexpectedResponse.
func decodeState(body []byte) (*LockState, error) {
	var v stateJSON
	if err := unmarshal(body, &v); err != nil {
		return nil, err
	}
	st := &LockState{Name: v.Name, Held: v.Held, Owner: v.Owner, Count: v.Count, Fence: v.Fence,
		TTL: ms(v.TTLms), ExpiresAt: v.ExpiresAt, Waiters: v.Waiters, Mode: v.Mode, Holders: v.Holders,
		Limit: deref(v.Limit), Raw: append([]byte(nil), body...)}
	if len(v.Holds) > 0 {
		st.Holds = make([]HoldInfo, len(v.Holds))
		for i, h := range v.Holds {
			st.Holds[i] = HoldInfo{Owner: h.Owner, Fence: h.Fence, Count: h.Count, TTL: ms(h.TTLms),
				ExpiresAt: h.ExpiresAt, Shared: h.Shared}
		}
	}
	return st, nil
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func unmarshal(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: decode body: %w", ErrUnexpectedResponse, err)
	}
	return nil
}
