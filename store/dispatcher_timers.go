package store

import (
	"context"
	"time"
)

// The dispatcher's expiry timers: each channel has one at the holder's expected
// lease end, which pokes the lock (expiry runs no script) and wakes its waiters.

func (c *channel) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// expiryMargin is how long after the expected lease end the poke runs: Redis
// expires a key once its time has strictly passed.
const expiryMargin = 2 * time.Millisecond

// arm sets the channel's timer; the caller holds d.mu.
func (d *dispatcher) arm(c *channel, pttl time.Duration) {
	if pttl < 0 {
		pttl = 0
	}
	at := time.Now().Add(pttl + expiryMargin)
	if c.timer != nil {
		if !c.deadline.After(at) {
			return
		}
		c.timer.Stop()
	}
	c.deadline = at
	c.timer = time.AfterFunc(time.Until(at), func() { d.fire(c) })
}

// fire pokes a lock whose holder's lease should have run out. The poke hands it on
// and publishes; if it is still held (renewed, or a new holder), the timer is set
// again to the new lease end.
func (d *dispatcher) fire(c *channel) {
	d.mu.Lock()
	if d.chans[c.key] != c {
		d.mu.Unlock()
		return
	}
	c.timer = nil
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	held, pttl, err := d.poke(ctx, c.name)
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.chans[c.key] != c {
		return
	}
	switch {
	case err != nil:
		d.arm(c, 50*time.Millisecond)
	case !held:
		// Free: the poke may have announced nothing (nobody's interest was
		// left on the lock: its key ran out with a hold that outlived the
		// fence guard). This process's own waiters look, as an 'r' makes them.
		c.wakeOneAcquirer(false)
		c.wakeOneAcquirer(true)
		for _, w := range c.waiters {
			if w.kind == kindWatch {
				w.notify()
			}
		}
	case held:
		d.arm(c, pttl)
		// Held at the lease's end: renewed, or taken by someone else after the
		// lease ran out and before this poke, which published nothing. Watchers
		// look: a change of hands by expiry must not go unseen.
		for _, w := range c.waiters {
			if w.kind == kindWatch {
				w.notify()
			}
		}
	}
}
