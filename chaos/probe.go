package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/client"
)

// probeTimeout bounds how long recovery from one fault is waited for.
const probeTimeout = 30 * time.Second

// probeTTL is the lease of a probe's holder: long enough for the queueing and
// the handoff (at most a second each), and short, since a probe cut off by a
// fault can leave it in Redis to expire (the leak check waits for it: settle).
const probeTTL = 4 * time.Second

// recovered waits until the service works again after a fault that ended at since:
// a lock handed from a holder on each Baton process to a fair waiter on each other
// one, through a release and pub/sub, within a second. It returns how long after
// since that first held, or an error when it did not within probeTimeout.
func (r *trial) recovered(since time.Time) (time.Duration, error) {
	var err error
	for time.Since(since) < probeTimeout {
		if err = r.handoffs(); err == nil {
			return time.Since(since), nil
		}
		r.tal.refused.note(err, false)
		time.Sleep(20 * time.Millisecond) // a retry pause; the fault's end is not observable
	}
	return 0, fmt.Errorf("not recovered %v after the fault: %w", probeTimeout, err)
}

func (r *trial) handoffs() error {
	for x := range r.top.cls {
		for y := range r.top.cls {
			if x != y {
				if err := r.handoff(r.top.cls[x], r.top.cls[y]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// handoff: x grants a probe lock; a fair waiter on y queues; x releases; the
// waiter must be answered with the lease within a second. Each try uses a lock of
// its own, so that what a failed try leaves behind cannot fail the next.
func (r *trial) handoff(x, y *client.Client) error {
	r.probes++
	name := fmt.Sprintf("probe-%d", r.probes)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := x.Acquire(ctx, name, client.AcquireOptions{TTL: probeTTL})
	if err != nil {
		return err
	}
	if h.Lease == nil {
		return errors.New("probe holder not granted")
	}
	type result struct {
		res *client.AcquireResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		res, err := y.Acquire(ctx, name, client.AcquireOptions{TTL: 2 * time.Second, Fair: true, Wait: 3 * time.Second})
		got <- result{res, err}
	}()
	// The ticket is queued once the waiter's subscription is confirmed.
	for queued := time.Now().Add(time.Second); ; {
		st, err := x.State(ctx, name)
		if err == nil && st.Waiters == 1 {
			break
		}
		if time.Now().After(queued) {
			_, _ = x.ForceRelease(ctx, name)
			return fmt.Errorf("probe waiter not queued within 1s (last: %v)", err)
		}
		time.Sleep(5 * time.Millisecond) // the queue is only visible by asking
	}
	released := time.Now()
	if _, err := x.Release(ctx, name, h.Lease.ID); err != nil {
		_, _ = x.ForceRelease(ctx, name)
		return err
	}
	select {
	case g := <-got:
		if g.err != nil {
			return g.err
		}
		if g.res.Lease == nil {
			return errors.New("probe waiter not granted")
		}
		_, err := y.Release(ctx, name, g.res.Lease.ID)
		if d := time.Since(released); err == nil && d > time.Second {
			return fmt.Errorf("probe handoff took %v", d)
		}
		return err
	case <-time.After(time.Second):
		cancel()
		return errors.New("probe waiter not answered within 1s of the release")
	}
}
