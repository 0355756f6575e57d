package store

import (
	"errors"
	"time"
)

// Sentinel errors returned by the Store. Callers compare with errors.Is.
var (
	// ErrLockHeld: the lock is held by someone else (or queued waiters come first)
	// and the wait, if any, elapsed. The error is a *HeldError with the details.
	ErrLockHeld = errors.New("lock held")
	// ErrLeaseNotHeld: the lease expired, was released, taken by force, or never existed.
	ErrLeaseNotHeld = errors.New("lease not held")
	// ErrTicketGone: the ticket expired, was cancelled, or never existed.
	ErrTicketGone = errors.New("ticket gone")
	// ErrTooManyWaiters: this process already holds its maximum of long-polls.
	ErrTooManyWaiters = errors.New("too many waiters")
	// ErrUnavailable: Redis cannot be reached, or the store is shutting down.
	ErrUnavailable = errors.New("store unavailable")
)

// HeldError describes the holder and queue of a lock that could not be granted.
type HeldError struct {
	TTL     time.Duration // the holder's remaining lease
	Owner   string        // the holder's owner label
	Waiters int           // queued tickets
}

func (e *HeldError) Error() string { return "lock held" }

// Is makes errors.Is(err, ErrLockHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrLockHeld }
