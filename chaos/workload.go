package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// writeGuard is how long before its lease's end, by its own clock, a careful
// holder stops writing. Zombies ignore it.
const writeGuard = 50 * time.Millisecond

// worker is one client of the workload. In a loop, until the workload's time or
// its operation budget runs out, it picks a lock and asks for it: fair or not,
// with a wait or without, exclusive or, on the locks that take them (modes),
// shared. Holding exclusively, it writes to the lock's resource; holding, it renews,
// re-enters, reads its lease and releases; some holders stop renewing and write on
// past their lease's end (zombies, as after a long pause); some fair waiters stop
// polling (their ticket is abandoned), others cancel; and some clients hang up
// in the middle of a request (hangup.go). Every acquire carries an owner label of
// its own, so that a hold found in Redis names the request it was granted to.
type worker struct {
	caller
	cfg   *config
	rng   *rand.Rand
	locks []string // the workload's locks
	race  []string // the locks of the races (raceRelease, expiryRace), which nobody else queues for
	res   map[string]*check.Resource
	modes map[string]lockMode
	ops   *atomic.Int64 // requests made by this worker
	seq   int           // acquires made, for their owner labels
}

func newWorker(id int, r *trial) *worker {
	cfg := r.cfg
	w := &worker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, uint64(id))), locks: r.locks, race: r.race, res: r.res,
		modes: r.modes, ops: new(atomic.Int64)}
	p := appA // the workers alternate between the two tenants
	if id%2 == 1 {
		p = appB
	}
	cls := r.top.clientsOf(p)
	w.caller = caller{id: id, cls: cls, bases: r.top.bases, key: r.top.keys[p], rec: &r.rec, tal: &r.tal, pick: func() int {
		w.ops.Add(1)
		return w.rng.IntN(len(cls))
	}}
	return w
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil && w.ops.Load() < int64(w.cfg.maxOps) {
		w.cycle(ctx)
	}
}

func (w *worker) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

func (w *worker) chance(p float64) bool { return w.rng.Float64() < p }

// label is a new owner label, unique to the request: c<worker>.<n>.
func (w *worker) label() string {
	w.seq++
	return "c" + strconv.Itoa(w.id) + "." + strconv.Itoa(w.seq)
}

// elsewhere is a caller for requests made from another goroutine than the
// worker's, all to one Baton process picked now.
func (w *worker) elsewhere() caller {
	return w.caller.on(w.rng.IntN(len(w.cls)), func() { w.ops.Add(1) })
}

// backoff pauses after an answer that says the service is in trouble (a 5xx, a
// transport error), as a client honouring Retry-After would, only shorter.
func (w *worker) backoff() { time.Sleep(w.dur(50*time.Millisecond, 250*time.Millisecond)) }

func (w *worker) cycle(ctx context.Context) {
	name := w.locks[w.rng.IntN(len(w.locks))]
	switch p := w.rng.Float64(); {
	case p < w.cfg.hangUps:
		w.hangUp(ctx, name)
		return
	case p < w.cfg.hangUps+w.cfg.expiryRaces:
		w.expiryRace(ctx)
		return
	}
	ttl := w.dur(w.cfg.minTTL, w.cfg.maxTTL)
	if w.chance(0.15) {
		ttl = w.dur(w.cfg.maxTTL, w.cfg.longTTL) // outlives a Redis restart
	}
	o := client.AcquireOptions{TTL: ttl, Owner: w.label()}
	w.pickMode(name, &o)
	switch r := w.rng.Float64(); {
	case r < 0.35:
		o.Fair = true
		if w.chance(0.5) {
			o.Wait = w.dur(50*time.Millisecond, w.cfg.maxWait)
		}
	case r < 0.5: // no wait
	default:
		o.Wait = w.dur(50*time.Millisecond, w.cfg.maxWait)
	}
	if w.chance(w.cfg.keyed) {
		o.IdempotencyKey = client.NewIdempotencyKey()
	}
	res, op := w.acquireIdem(name, o)
	switch op.Outcome {
	case check.OK:
		from, to := check.GrantWindow(op)
		w.hold(ctx, name, res.Lease, from, to, ttl)
		w.replayEnded(name, o, op)
	case check.Queued:
		asked := op.Call
		if !op.TicketCall.IsZero() {
			asked = op.TicketCall // the key's first try
		}
		w.await(ctx, name, ticket{id: res.Ticket.ID, owner: o.Owner, asked: asked, shared: o.Shared}, ttl)
		w.replayEnded(name, o, op)
	case check.Busy:
		time.Sleep(w.dur(5*time.Millisecond, 40*time.Millisecond))
	default:
		w.backoff()
	}
}

// idemRetryFor bounds how long an acquire with an Idempotency-Key whose answer
// was lost is tried again. A client that gives up leaves whatever its request
// made to run out (Baton does not undo an idempotent request: its client is
// expected to come back for it), so the workload keeps trying while the
// service recovers, well past the workload's end if need be.
const idemRetryFor = 20 * time.Second

// acquireIdem makes an acquire. With an Idempotency-Key, a try whose answer
// was lost (a transport error, a 5xx) is sent again with the same key and body
// until one is answered, as a client that lost the answer would; and now and
// then an answered one is sent again too (its answer lost on the way back, as
// far as the server knows): the replay must be the same lease or ticket
// (check.Idempotency), its lost answers retried likewise. The result is the
// last answer that granted or queued, else the last try's.
func (w *worker) acquireIdem(name string, o client.AcquireOptions) (*client.AcquireResult, check.Op) {
	res, op := w.acquire(name, o)
	if o.IdempotencyKey == "" {
		return res, op
	}
	first := op.Call
	res, op = w.untilAnswered(name, o, res, op, first)
	if (op.Outcome == check.OK || op.Outcome == check.Queued) && w.chance(w.cfg.replays) {
		r2, op2 := w.acquireTry(name, o, nil, op.Try+1, first)
		r2, op2 = w.untilAnswered(name, o, r2, op2, first)
		if op2.Outcome == check.OK || op2.Outcome == check.Queued {
			res, op = r2, op2
		}
	}
	return res, op
}

// untilAnswered sends an acquire with an Idempotency-Key again, with the
// same key and body, while its answer was lost (op: its latest try; first:
// when the key's first try was called), for up to idemRetryFor from op's call.
func (w *worker) untilAnswered(name string, o client.AcquireOptions, res *client.AcquireResult, op check.Op,
	first time.Time) (*client.AcquireResult, check.Op) {
	for from := op.Call; op.Outcome == check.Unknown && time.Since(from) < idemRetryFor; {
		w.backoff()
		res, op = w.acquireTry(name, o, nil, op.Try+1, first)
	}
	return res, op
}

// replayEnded now and then sends an acquire with an Idempotency-Key again
// after what it made has ended (released, run out, cancelled): within
// BATON_IDEMPOTENCY_GRACE (the runner's outlasts any fault: idemGrace) that
// is a 409 idempotency-key-used, never a new hold. Should it be one all the
// same (Redis lost the key's record), the hold is released and
// check.Idempotency judges it.
func (w *worker) replayEnded(name string, o client.AcquireOptions, last check.Op) {
	if o.IdempotencyKey == "" || !w.chance(w.cfg.replays) {
		return
	}
	first := last.TicketCall
	if first.IsZero() {
		first = last.Call
	}
	res, op := w.acquireTry(name, o, nil, last.Try+1, first)
	res, op = w.untilAnswered(name, o, res, op, first)
	switch op.Outcome {
	case check.OK:
		w.releaseAll(name, res.Lease, res.Lease.Count)
	case check.Queued:
		w.cancel(name, ticket{id: res.Ticket.ID, owner: o.Owner})
	}
}

// await polls a ticket until it is granted, gone or given up.
func (w *worker) await(ctx context.Context, name string, t ticket, ttl time.Duration) {
	abandonAt := -1
	if w.chance(0.15) {
		abandonAt = w.rng.IntN(3)
	}
	for i := range 30 {
		if i == abandonAt || ctx.Err() != nil {
			return // stops polling: the ticket runs out, and any grant made to it
		}
		if w.chance(0.04) {
			w.cancel(name, t)
			return
		}
		res, op := w.poll(name, t, w.dur(100*time.Millisecond, w.cfg.maxPoll))
		switch op.Outcome {
		case check.OK:
			from, to := check.GrantWindow(op)
			w.hold(ctx, name, res.Lease, from, to, ttl)
			return
		case check.Queued:
		case check.Unknown: // the ticket may well be there still: poll again, soon
			w.backoff()
		default:
			return
		}
	}
	w.cancel(name, t)
}

// hold works under a lease granted between from and to, then releases it. A
// shared holder reads, so it writes nothing to the resource: the fenced
// resource judges the exclusive holders' writes.
func (w *worker) hold(ctx context.Context, name string, l *client.Lease, from, to time.Time, ttl time.Duration) {
	res := w.res[name]
	wr := check.Writer{Lease: l.ID, Fence: l.Fence, GrantFrom: from, GrantTo: to}
	write := func() {
		if !l.Shared {
			res.Write(wr)
		}
	}
	zombie := !l.Shared && w.chance(0.12)
	end, count := l.ExpiresAt, l.Count
	lost := false // told lease-not-held: nothing left to release
	for i, steps := 0, 1+w.rng.IntN(4); i < steps && !lost; i++ {
		if !zombie && time.Now().After(end.Add(-writeGuard)) {
			break // by its own clock the lease is over: a careful holder stops writing
		}
		write()
		var got *client.Lease
		var op check.Op
		switch r := w.rng.Float64(); {
		case zombie:
		case r < 0.45:
			got, op = w.renew(name, l.ID, ttl, l.Shared)
		case r < 0.60 && count < 3:
			got, op = w.reenter(name, l.ID, ttl, l.Shared)
		case r < 0.70:
			got, op = w.get(name, l.ID, l.Shared)
		}
		switch {
		case got != nil:
			count = got.Count
			if op.Kind != check.Get {
				end = got.ExpiresAt
			}
		case op.Outcome == check.NotHeld:
			lost = true
			continue
		}
		time.Sleep(w.dur(ttl/10, ttl/4))
	}
	if zombie {
		// Paused past its lease, it wakes up and writes on as if it still held.
		for until := end.Add(ttl / 2); time.Now().Before(until); {
			write()
			time.Sleep(ttl / 5)
		}
	}
	if !lost {
		w.releaseAll(name, l, count)
	}
}

// releaseAll releases the holds left; after an unknown outcome it reads the
// lease to learn how many are left.
func (w *worker) releaseAll(name string, l *client.Lease, count int) {
	for tries := 0; count > 0 && tries < 6; tries++ {
		r, op := w.release(name, l.ID, l.Fence)
		switch op.Outcome {
		case check.OK:
			count = r.Count
		case check.Unknown:
			w.backoff()
			got, op := w.get(name, l.ID, l.Shared)
			if op.Outcome == check.NotHeld {
				return
			}
			if got != nil {
				count = got.Count
			}
		default:
			return
		}
	}
}

// lockMode is how a lock of the workload is taken: exclusively
// only, or shared with probability shared (and exclusively otherwise), every
// shared hold under the lock's limit (0: none). Every holder of a lock must
// agree on its limit, so each lock has one.
type lockMode struct {
	shared float64
	limit  int
}

// lockModes gives the workload's locks their modes: of every four, the third
// is a semaphore (shared holds, at most 2 at once, and now and then an
// exclusive one) and the fourth a read-write lock (readers without a limit,
// and writers); the others are taken exclusively only.
func lockModes(locks []string) map[string]lockMode {
	m := map[string]lockMode{}
	for i, l := range locks {
		switch i % 4 {
		case 2:
			m[l] = lockMode{shared: 0.75, limit: 2}
		case 3:
			m[l] = lockMode{shared: 0.6}
		}
	}
	return m
}

// pickMode makes o a shared request now and then, on a lock that takes them.
func (w *worker) pickMode(name string, o *client.AcquireOptions) {
	if m := w.modes[name]; m.shared > 0 && w.chance(m.shared) {
		o.Shared, o.Limit = true, m.limit
	}
}
