package check

import (
	"sync"
	"time"
)

// Resource is the thing a lock protects, as fencing expects it to behave: it
// rejects any write carrying a fence lower than the highest it has seen. Every
// holder writes to it with its fence while it believes it holds the lock.
//
// A write it accepts is stale when it has already seen a write (accepted or not)
// from a holder that was granted the lock after this writer's grant had returned:
// that later grant means this writer had lost the lock, and with fences that
// increase over grants the later holder's fence, or a higher one, would have
// turned this write away. So a stale write accepted means fences out of order.
// The rejected writes are the stale ones fencing caught: holders whose lease ran
// out, or whose lock vanished with Redis's data, writing on.
type Resource struct {
	mu       sync.Mutex
	high     int64  // the highest fence accepted
	newest   Writer // the writer seen whose grant started last
	accepted int
	rejected int
	stale    int
	samples  []StaleWrite
}

// Writer is the holder making a write: its fence and when its grant happened
// (GrantWindow).
type Writer struct {
	Lease              string
	Fence              int64
	GrantFrom, GrantTo time.Time
}

// StaleWrite describes an accepted stale write, for the report: Newer was
// granted the lock after Writer's grant and wrote first.
type StaleWrite struct {
	Writer, Newer Writer
	At            time.Time
}

// Write offers one write; it reports whether the resource accepted it.
func (r *Resource) Write(w Writer) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	stale := r.newest.GrantFrom.After(w.GrantTo)
	newer := r.newest
	if w.GrantFrom.After(r.newest.GrantFrom) {
		r.newest = w
	}
	if w.Fence < r.high {
		r.rejected++
		return false
	}
	if stale {
		r.stale++
		if len(r.samples) < 5 {
			r.samples = append(r.samples, StaleWrite{Writer: w, Newer: newer, At: time.Now()})
		}
	}
	r.accepted++
	r.high = w.Fence
	return true
}

// Counts returns the writes accepted, the stale ones among them, and those rejected.
func (r *Resource) Counts() (accepted, staleAccepted, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.stale, r.rejected
}

// Samples returns up to five stale writes the resource accepted.
func (r *Resource) Samples() []StaleWrite {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]StaleWrite(nil), r.samples...)
}
