package store

import (
	"errors"
	"time"
)

// Sentinel errors returned by the Store. Callers compare with errors.Is.
var (
	// ErrLockHeld: there is no room for the hold (or queued waiters come first)
	// and the wait, if any, elapsed. The error is a *HeldError with the details.
	ErrLockHeld = errors.New("lock held")
	// ErrLeaseNotHeld: the lease expired, was released, taken by force, never
	// existed, or belongs to another principal.
	ErrLeaseNotHeld = errors.New("lease not held")
	// ErrTicketGone: the ticket expired, was cancelled, never existed, or belongs
	// to another principal.
	ErrTicketGone = errors.New("ticket gone")
	// ErrLimitMismatch: a shared request's limit differs from the lock's shared
	// holds'. The error is a *LimitError with the lock's limit.
	ErrLimitMismatch = errors.New("limit mismatch")
	// ErrModeMismatch: a re-entry named the other mode than its hold's.
	ErrModeMismatch = errors.New("mode mismatch")
	// ErrSessionNotFound: the session expired, was deleted, never existed, or
	// belongs to another principal.
	ErrSessionNotFound = errors.New("session not found")
	// ErrIdempotencyUsed: what the request's Idempotency-Key made has ended.
	ErrIdempotencyUsed = errors.New("idempotency key used")
	// ErrIdempotencyMismatch: the Idempotency-Key was used with another body.
	ErrIdempotencyMismatch = errors.New("idempotency key mismatch")
	// ErrCapReached: the principal has as many live holds, tickets or sessions
	// as its caps allow (Caps). The error is a *CapError naming the cap.
	ErrCapReached = errors.New("cap on live objects reached")
	// ErrTooManyWaiters: this process already holds its maximum of long-polls.
	ErrTooManyWaiters = errors.New("too many waiters")
	// ErrUnavailable: Redis cannot be reached, or the store is shutting down.
	ErrUnavailable = errors.New("store unavailable")
	// ErrOverloaded: this process is past its own bounds (admission.go): a
	// call found MaxQueuedCalls calls waiting for a Redis connection already,
	// or waited MaxQueueWait for one while Redis answered others, or go-redis's
	// pool had no connection for it in time. Nothing was sent. Any operation
	// may return it.
	ErrOverloaded = errors.New("overloaded")
)

// HeldError describes why a lock could not be granted: its soonest-ending hold
// and its queue.
type HeldError struct {
	TTL     time.Duration // until the soonest-ending hold ends
	Owner   string        // that hold's owner label
	Waiters int           // queued tickets

	wake time.Duration // until something may change unannounced (a hold's or the head ticket's end)
}

func (e *HeldError) Error() string { return "lock held" }

// Is makes errors.Is(err, ErrLockHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrLockHeld }

// LimitError is a shared request's limit that differs from the lock's.
type LimitError struct {
	Limit int // the lock's limit; 0 for none
}

func (e *LimitError) Error() string { return "limit mismatch" }

// Is makes errors.Is(err, ErrLimitMismatch) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimitMismatch }
