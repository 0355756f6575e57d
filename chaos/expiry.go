package main

import (
	"context"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// expiryRace makes a lock change hands by expiry under a watch (a watch
// slept through exactly this). The worker takes a lock of the races with a short
// lease and lets it run out; meanwhile a watch of that lease's fence waits, on
// either Baton process; from just before the lease's end (by the Redis clock,
// which is this machine's) the worker asks for the lock again without a wait,
// every millisecond, so that it is taken before any waiter's timer pokes the
// lock, which publishes nothing then. It holds the lock a while and releases
// it. The watch must return within check.WatchBound of the expiry.
func (w *worker) expiryRace(ctx context.Context) {
	name := w.race[w.rng.IntN(len(w.race))]
	res, op := w.acquire(name, client.AcquireOptions{TTL: w.dur(150*time.Millisecond, 300*time.Millisecond), Owner: w.label()})
	switch op.Outcome {
	case check.OK:
	case check.Busy:
		time.Sleep(w.dur(5*time.Millisecond, 40*time.Millisecond))
		return
	default:
		w.backoff()
		return
	}
	l := res.Lease
	watcher := w.elsewhere()
	watched := make(chan struct{})
	go func() { defer close(watched); watcher.watch(name, l.Fence, 2*time.Second) }()
	time.Sleep(time.Until(l.ExpiresAt.Add(-3 * time.Millisecond))) // a deadline, not an event
	for until := l.ExpiresAt.Add(50 * time.Millisecond); time.Now().Before(until) && ctx.Err() == nil; {
		ttl := w.dur(w.cfg.minTTL, w.cfg.maxTTL)
		res, op := w.acquire(name, client.AcquireOptions{TTL: ttl, Owner: w.label()})
		if op.Outcome == check.OK {
			time.Sleep(w.dur(ttl/4, ttl/2))
			w.releaseAll(name, res.Lease, 1)
			break
		}
		if op.Outcome != check.Busy {
			break
		}
		time.Sleep(time.Millisecond) // an expiry is announced to nobody without a wait: ask again
	}
	<-watched
}
