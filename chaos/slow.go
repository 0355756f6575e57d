package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// The slow-Redis faults. A Redis that stops answering for longer than
// the store's 2 s read timeout leaves Baton's calls without a definite answer:
// the client is told 503 (or, if Baton is shutting down, has its connection
// closed) while the script still runs once Redis reads it. Whatever it granted
// is a hold nobody knows, which Baton must undo in the background
// (store/abandon.go). Each fault below also sends requests of its own while
// Redis is frozen, asking for frozenTTL, far above the ticket ttl, so that a
// hold left behind shows as an orphan (check.Orphans).

// frozenTTL is the lease the requests sent into a frozen Redis ask for.
const frozenTTL = 10 * time.Second

// inStore is how long after they are sent the requests into a frozen Redis are
// taken to be in flight in the store: on loopback a request reaches Baton and
// its script is written to Redis's connection within a few milliseconds, and
// nothing outside Baton shows that it has.
const inStore = 200 * time.Millisecond

// slowRedis freezes redis-server (SIGSTOP) for freezeMin to freezeMax at a
// time, longer than the store's 2 s read timeout, and thaws it (SIGCONT); 2 s
// pass between the end of one freeze's recovery and the next.
func slowRedis(ctx context.Context, r *trial) error {
	all := []int{}
	for i := range r.top.batons {
		all = append(all, i)
	}
	for sleepCtx(ctx, 2*time.Second) {
		freeze := r.freezeTime()
		tickets := r.queueTickets(all)
		stopped := time.Now()
		r.top.redis.Freeze()
		calls := r.frozenCalls(all, tickets)
		time.Sleep(freeze) // Redis is thawed even when ctx ends meanwhile
		r.top.redis.Thaw()
		thawed := time.Now()
		r.fault(stopped, thawed, lostRedis, "redis-server frozen")
		calls()
	}
	return nil
}

// sigtermMidCall freezes redis-server, sends requests to one Baton process (in
// turn) so that they are in flight in its store, sends that process SIGTERM,
// thaws Redis after freezeMin to freezeMax in all, waits for the process to exit
// (it has its default BATON_SHUTDOWN_TIMEOUT, and must undo what its calls may
// have been granted before it exits), and starts it again. Recovery is timed
// from the new start, as for a killed process.
func sigtermMidCall(ctx context.Context, r *trial) error {
	var exits []time.Duration
	n := 0
	for sleepCtx(ctx, 2*time.Second) {
		i := n % len(r.top.batons)
		n++
		b := r.top.batons[i]
		freeze := r.freezeTime()
		tickets := r.queueTickets([]int{i})
		stopped := time.Now()
		r.top.redis.Freeze()
		calls := r.frozenCalls([]int{i}, tickets)
		time.Sleep(inStore)
		termed := time.Now()
		b.terminate()
		time.Sleep(time.Until(stopped.Add(freeze))) // Redis is thawed even when ctx ends meanwhile
		r.top.redis.Thaw()
		thawed := time.Now()
		r.span(stopped, thawed, lostRedis, "redis-server frozen")
		clean := b.awaitExit(stopGrace)
		exits = append(exits, time.Since(termed))
		if !clean {
			r.mu.Lock()
			r.faultErrs = append(r.faultErrs, fmt.Sprintf("baton %s did not exit within %v of SIGTERM (killed)", b.name, stopGrace))
			r.mu.Unlock()
		}
		calls()
		restarted := time.Now()
		if err := b.start(); err != nil {
			return err
		}
		r.fault(stopped, restarted, onServer(i), "baton "+b.name+" terminated mid-call")
	}
	if len(exits) > 0 {
		slices.Sort(exits)
		r.note("SIGTERM to exit, with Redis frozen until %v-%v after the freeze began: p50 %v, max %v (%d times)",
			r.cfg.freezeMin, r.cfg.freezeMax, round(exits[len(exits)/2]), round(exits[len(exits)-1]), len(exits))
	}
	return nil
}

func (r *trial) freezeTime() time.Duration {
	return r.cfg.freezeMin + time.Duration(r.rng.Int64N(int64(r.cfg.freezeMax-r.cfg.freezeMin)+1))
}

// frozenLabels numbers the owner labels of the injectors' requests.
var frozenLabels atomic.Int64

func (r *trial) label() string { return "f" + strconv.FormatInt(frozenLabels.Add(1), 10) }

// queued is a ticket the injector queued on a Baton process before a freeze.
type queued struct {
	server int
	lock   string
	t      ticket
}

// queueTickets queues, on each given Baton process, a fair acquire of frozenTTL
// on a lock of the workload, to be polled while Redis is frozen. A lock that is
// free is granted instead, and released at once.
func (r *trial) queueTickets(servers []int) []queued {
	var out []queued
	for _, i := range servers {
		c := r.caller.on(i, func() {})
		name := r.locks[r.rng.IntN(len(r.locks))]
		o := client.AcquireOptions{TTL: frozenTTL, Owner: r.label(), Fair: true}
		res, op := c.acquire(name, o)
		switch op.Outcome {
		case check.Queued:
			out = append(out, queued{server: i, lock: name, t: ticket{id: res.Ticket.ID, owner: o.Owner, asked: op.Call}})
		case check.OK:
			letGo(c, name, res.Lease)
		}
	}
	return out
}

// frozenCalls sends, to each given Baton process, the requests that are to be
// in flight in its store while Redis is frozen: a non-fair acquire without a
// wait and one with a wait, a fair one without a wait and one with a wait, all
// of frozenTTL on locks of the workload, and a poll of each ticket queued. It
// returns a function that waits for their answers and lets go of whatever they
// were granted or queued.
func (r *trial) frozenCalls(servers []int, tickets []queued) (wait func()) {
	var wg sync.WaitGroup
	for _, i := range servers {
		c := r.caller.on(i, func() {})
		for _, o := range []client.AcquireOptions{{}, {Wait: 2 * time.Second}, {Fair: true}, {Fair: true, Wait: 2 * time.Second}} {
			o.TTL, o.Owner = frozenTTL, r.label()
			name := r.locks[r.rng.IntN(len(r.locks))]
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, op := c.acquire(name, o)
				switch op.Outcome {
				case check.OK:
					letGo(c, name, res.Lease)
				case check.Queued:
					c.cancel(name, ticket{id: res.Ticket.ID, owner: o.Owner, asked: op.Call})
				}
			}()
		}
	}
	for _, q := range tickets {
		c := r.caller.on(q.server, func() {})
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, op := c.poll(q.lock, q.t, 2*time.Second)
			switch op.Outcome {
			case check.OK:
				letGo(c, q.lock, res.Lease)
			case check.Queued:
				c.cancel(q.lock, q.t)
			}
		}()
	}
	return wg.Wait
}

// letGo releases a lease the injector was granted, trying a few times while
// the answer is unknown.
func letGo(c caller, name string, l *client.Lease) {
	for range 5 {
		_, op := c.release(name, l.ID, l.Fence)
		if op.Outcome != check.Unknown {
			return
		}
		time.Sleep(200 * time.Millisecond) // Redis is out of reach: try again shortly
	}
}
