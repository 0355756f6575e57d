package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// failover is one master kill: when the master was killed, and when every
// sentinel named the new master.
type failover struct{ killed, promoted time.Time }

// lostTally is what lostLocks found over all failovers.
type lostTally struct {
	atRisk, lost, confirmed int
}

func (l lostTally) String() string {
	rate := 0.0
	if l.atRisk > 0 {
		rate = 100 * float64(l.lost) / float64(l.atRisk)
	}
	return fmt.Sprintf("lost locks: %d of %d holds that outlived a failover (%.1f%%; %d seen kept, %d unobserved)",
		l.lost, l.atRisk, rate, l.confirmed, l.atRisk-l.lost-l.confirmed)
}

// lostLocks measures, from the history, the holds each failover lost.
//
// A hold is at risk in a failover when its holder was told, by an answer that
// returned before the kill, that its lease runs until a moment after every
// sentinel named the new master (plus check.Slack), and it had not been told the
// hold was released. Its validity is that moment, lowered by any renewal or
// re-entry whose outcome is unknown (had it happened, the lease would run at
// least ttl from its call); a release by the holder (succeeded or unknown) ends
// the observation at its call. The hold is lost when, before its validity (less
// Slack), the service acted as if it were not held: its holder's renewal,
// re-entry, read or release answered 404 lease-not-held, or another lease of the
// lock was granted (acquired_at on the Redis clock) that could not stand beside
// it (one of the two exclusive). Otherwise it is seen kept
// when a request of its holder after the kill succeeded, else unobserved (and
// counted as kept).
func lostLocks(ops []check.Op, fos []failover, locks []string) lostTally {
	var t lostTally
	want := map[string]bool{}
	for _, l := range locks {
		want[l] = true
	}
	byLock := map[string][]check.Op{}
	for _, o := range ops {
		if want[o.Lock] && o.Kind != check.Loss {
			byLock[o.Lock] = append(byLock[o.Lock], o)
		}
	}
	for _, f := range fos {
		for _, lops := range byLock {
			for lease, until := range heldAcross(lops, f) {
				switch judgeHold(lops, lease, until, f) {
				case holdLost:
					t.atRisk++
					t.lost++
				case holdKept:
					t.atRisk++
					t.confirmed++
				case holdUnobserved:
					t.atRisk++
				}
			}
		}
	}
	return t
}

// heldAcross returns the leases of one lock at risk in f, each with the end of
// its acknowledged validity.
func heldAcross(ops []check.Op, f failover) map[string]time.Time {
	held := map[string]time.Time{}
	for _, o := range ops {
		if !o.Return.Before(f.killed) {
			continue
		}
		switch {
		case o.Outcome == check.OK && (o.Kind == check.Acquire || o.Kind == check.Poll ||
			o.Kind == check.Reenter || o.Kind == check.Renew):
			if o.ExpiresAt.After(held[o.Lease]) {
				held[o.Lease] = o.ExpiresAt
			}
		case o.Outcome == check.OK && o.Kind == check.Release && o.Released,
			o.Outcome == check.NotHeld:
			held[o.Lease] = time.Time{}
		}
	}
	for lease, until := range held {
		if !until.After(f.promoted.Add(check.Slack)) {
			delete(held, lease)
		}
	}
	return held
}

type holdVerdict int

const (
	holdUnobserved holdVerdict = iota
	holdKept
	holdLost
	holdExcluded // its validity, lowered by an unknown renewal, ended before the failover did
)

func judgeHold(ops []check.Op, lease string, until time.Time, f failover) holdVerdict {
	// The holder's requests since the kill: a renewal or re-entry with an
	// unknown outcome lowers the validity (had it happened, the lease would run
	// at least ttl from its call); any release ends the observation at its call
	// (a grant after it is a handoff), and one that succeeded shows the hold kept.
	end, kept, shared := until, false, false
	for _, o := range ops {
		if o.Lease == lease && o.Outcome == check.OK && (o.Kind == check.Acquire || o.Kind == check.Poll) {
			shared = o.Shared
		}
		if o.Lease != lease || !o.Return.After(f.killed) {
			continue
		}
		switch {
		case o.Kind == check.Release && (o.Outcome == check.OK || o.Outcome == check.Unknown):
			end = minTime(end, o.Call)
		case o.Outcome == check.Unknown && (o.Kind == check.Renew || o.Kind == check.Reenter):
			if o.TTL <= 0 {
				return holdExcluded // renewed to its last ttl: unknown
			}
			end = minTime(end, o.Call.Add(o.TTL))
		}
		kept = kept || (o.Outcome == check.OK && !o.Call.Before(f.killed))
	}
	if !end.After(f.promoted.Add(check.Slack)) {
		return holdExcluded
	}
	limit := end.Add(-check.Slack)
	for _, o := range ops {
		if o.Call.Before(f.killed) || !o.Call.Before(limit) {
			continue
		}
		switch {
		case o.Lease == lease && o.Outcome == check.NotHeld && o.Return.Before(limit):
			return holdLost
		case o.Lease != lease && o.Outcome == check.OK && (o.Kind == check.Acquire || o.Kind == check.Poll) &&
			!(o.Shared && shared) && // shared holds coexist
			!o.AcquiredAt.IsZero() && o.AcquiredAt.After(f.killed) && o.AcquiredAt.Before(limit):
			return holdLost
		}
	}
	if kept {
		return holdKept
	}
	return holdUnobserved
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// canaryTTL is the lease of a canary: longer than a failover and the check
// after it, short enough to run out before the leak check ends.
const canaryTTL = 8 * time.Second

// canary is one lease granted by the canaries, on a lock name of its own.
type canary struct {
	name, lease string
	ret         time.Time // when the 201 came back
}

// canaryTally is what the canaries found: of the grants acknowledged before a
// kill, how many the new master no longer held.
type canaryTally struct {
	granted, lost, unknown int
}

func (c canaryTally) String() string {
	rate := 0.0
	if n := c.granted - c.unknown; n > 0 {
		rate = 100 * float64(c.lost) / float64(n)
	}
	s := fmt.Sprintf("canary grants lost: %d of %d acknowledged before a kill (%.2f%%)", c.lost, c.granted-c.unknown, rate)
	if c.unknown > 0 {
		s += fmt.Sprintf(", %d not checkable", c.unknown)
	}
	return s
}

// runCanaries grants leases on fresh lock names through every Baton, as fast as
// two clients per Baton can, until stop is closed (at the kill), and returns
// those whose grant was answered before stop. Every request goes into the
// history like the workload's.
func runCanaries(r *trial, round int, stop <-chan struct{}) []canary {
	var mu sync.Mutex
	var got []canary
	var wg sync.WaitGroup
	n := len(r.top.cls)
	for g := range 2 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &caller{id: 1000 + g, cls: r.top.cls, rec: &r.rec, tal: &r.tal, pick: func() int { return g % n }}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("canary-%d-%d-%d", round, g, i)
				res, op := c.acquire(name, client.AcquireOptions{TTL: canaryTTL})
				select {
				case <-stop: // answered during or after the kill: not a canary
					return
				default:
				}
				if op.Outcome == check.OK && res != nil && res.Lease != nil {
					mu.Lock()
					got = append(got, canary{name: name, lease: res.Lease.ID, ret: op.Return})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return got
}

// checkCanaries reads, once the service has recovered from the failover, each
// canary lease acknowledged before the kill: 200 is kept, 404 lease-not-held is
// lost (its lease had not run out). One it cannot read while the lease surely
// runs is not checkable. The leases are left to run out.
func checkCanaries(r *trial, cs []canary, killed time.Time) canaryTally {
	var t canaryTally
	var mu sync.Mutex
	work := make(chan canary)
	var wg sync.WaitGroup
	n := len(r.top.cls)
	for g := range 4 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &caller{id: 2000 + g, cls: r.top.cls, rec: &r.rec, tal: &r.tal, pick: func() int { return g % n }}
			for x := range work {
				verdict := check.Unknown
				for try := 0; try < 5 && verdict == check.Unknown && time.Now().Before(x.ret.Add(canaryTTL-time.Second)); try++ {
					if try > 0 {
						time.Sleep(100 * time.Millisecond) // a retry pause
					}
					_, op := c.get(x.name, x.lease, false)
					verdict = op.Outcome
				}
				mu.Lock()
				t.granted++
				switch verdict {
				case check.OK:
				case check.NotHeld:
					t.lost++
				default:
					t.unknown++
				}
				mu.Unlock()
			}
		}()
	}
	for _, c := range cs {
		if c.ret.Before(killed) {
			work <- c
		}
	}
	close(work)
	wg.Wait()
	return t
}

func (c *canaryTally) add(o canaryTally) {
	c.granted += o.granted
	c.lost += o.lost
	c.unknown += o.unknown
}
