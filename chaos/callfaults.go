package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/chaos/callproxy"
	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// The call-faults scenario: faults on single script calls. Each Baton process
// reaches Redis through a proxy of its own that reads the Redis protocol
// (callproxy), and the injector arms it, again and again, to fault the next
// script call on one lock: a copy of the call delivered late after its
// connection was closed under Baton, a call run with its reply dropped, or a
// call stalled past the store's 2 s read timeout. Baton sees a broken or
// timed-out connection and recovers as it does, while the call still runs in
// Redis, before or after whatever Baton did next.
//
// The faults are aimed: on locks of their own (aimLocks), an episode at a time
// on each, the injector takes a lock, arms the proxy of one Baton process, and
// sends through that process the request to fault: an acquire with an
// Idempotency-Key made while the lock is held, one without a key, a ticket's
// poll, or the holder's release; then the holder releases (at a random moment
// around the faulted call and its late copy), and another client asks for the
// lock with a wait, so that a second holder shows in the history. The
// faulted client behaves as clients do: a lost answer to a keyed acquire is
// sent again with the same key and body until it is answered; some clients
// hang up in the middle of the faulted request and never come back; the
// others go on with what they got (hold and release, poll a ticket, stop at
// a 423). Beside the aimed faults, stray ones hit whatever call comes next on
// a lock of the workload, which runs as in every scenario: a renewal, a
// poll, an undo, an expiry's handoff.
//
// It is one scenario of its own, not a fault mixed into the others: its
// faults leave Redis up, so every hold nobody knew of and every lost answer
// here is Baton's to settle, with no outage to excuse it, and each of the
// other rows keeps one fault to read its figures by.

// aimLocks is how many locks the aimed faults have to themselves (one
// episode at a time on each).
const aimLocks = 3

// aim is what a fault is aimed at.
type aim int

const (
	aimKeyed   aim = iota // an acquire with an Idempotency-Key, made while the lock is held
	aimPlain              // an acquire without a key, made while the lock is held
	aimPoll               // a ticket's poll, made while the lock is held
	aimRelease            // a holder's release
	aimStray              // the next call on a lock of the workload, whatever it is
	aims
)

var aimNames = [aims]string{"keyed acquires while held", "plain acquires while held", "polls", "releases", "stray calls"}

// callFault is one fault injected, for the details and faults.txt.
type callFault struct {
	aim    aim
	server int
	armed  time.Time
	hit    callproxy.Hit
	wasHit bool
}

// callLog collects the faults of a scenario.
type callLog struct {
	mu     sync.Mutex
	faults []callFault
}

func (l *callLog) add(f callFault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

// agents numbers the injector's clients: ids apart from the workers' and
// watchers'.
var agents atomic.Int64

// agent is a client of the injector's: a worker of its own (its own id,
// owner labels and random source), whose next request goes to Baton process
// pinned (if >= 0), the ones after it to either.
type agent struct {
	*worker
	pinned int
}

func (r *trial) agent() *agent {
	w := newWorker(1_000_000+int(agents.Add(1)), r)
	a := &agent{worker: w, pinned: -1}
	pick := w.pick
	w.pick = func() int {
		if i := a.pinned; i >= 0 {
			a.pinned = -1
			w.ops.Add(1)
			return i
		}
		return pick()
	}
	return a
}

// callFaults injects the aimed faults on their locks and the stray ones on
// the workload's, until ctx ends; each episode under way then runs to its end.
func callFaults(ctx context.Context, r *trial) error {
	if len(r.top.calls) == 0 {
		return fmt.Errorf("call faults: the scenario has no call proxies (calls: true)")
	}
	log := &callLog{}
	var wg sync.WaitGroup
	for i, name := range r.aimed {
		rng := rand.New(rand.NewPCG(r.cfg.seed, uint64(7000+i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; sleepCtx(ctx, dur(rng, 50*time.Millisecond, 400*time.Millisecond)); n++ {
				r.episode(rng, name, pickAim(rng), log)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(r.cfg.seed, 7999))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sleepCtx(ctx, dur(rng, 500*time.Millisecond, 1500*time.Millisecond)) {
			r.stray(ctx, rng, log)
		}
	}()
	wg.Wait()
	r.reportCalls(log)
	return nil
}

// pickAim picks what an episode's fault is aimed at: a keyed acquire two times
// in five, else a plain one, a poll or a release.
func pickAim(rng *rand.Rand) aim {
	switch p := rng.Float64(); {
	case p < 0.4:
		return aimKeyed
	case p < 0.6:
		return aimPlain
	case p < 0.8:
		return aimPoll
	}
	return aimRelease
}

// pickFault is a fault on lock: mostly a late copy (after 0.1 to 3 s), else a
// lost reply or a stall past the store's read timeout (2.2 to 3 s).
func pickFault(rng *rand.Rand, lock string) callproxy.Fault {
	switch p := rng.Float64(); {
	case p < 0.45:
		return callproxy.Fault{Lock: lock, Mode: callproxy.Late, Delay: dur(rng, 100*time.Millisecond, 3*time.Second)}
	case p < 0.75:
		return callproxy.Fault{Lock: lock, Mode: callproxy.LostReply}
	}
	return callproxy.Fault{Lock: lock, Mode: callproxy.Stall, Delay: dur(rng, 2200*time.Millisecond, 3*time.Second)}
}

func dur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// episode aims one fault at a request of kind a on lock name, made while
// another client holds it, and plays the clients out.
func (r *trial) episode(rng *rand.Rand, name string, a aim, log *callLog) {
	bg := context.Background() // an episode runs to its end
	holder := r.agent()
	hres, hop := holder.acquire(name, client.AcquireOptions{TTL: dur(rng, 1500*time.Millisecond, 3*time.Second),
		Owner: holder.label(), Wait: 2 * time.Second})
	if hop.Outcome != check.OK {
		time.Sleep(dur(rng, 50*time.Millisecond, 250*time.Millisecond))
		return
	}
	lease, count := hres.Lease, 1
	server := rng.IntN(len(r.top.calls))
	fault := pickFault(rng, name)
	// A third of the keyed episodes follow one recipe: a 423 answered by the
	// store's retry while the first attempt's copy is on its way (late by
	// 0.15 to 0.5 s), the holder letting go at once, the call after the retry
	// (mostly the undo Baton queues for the first attempt) stalled, and the
	// client asking again with its key 0.4 to 0.9 s after the 423: the copy
	// grants, the retry is told of the hold, and the undo comes last.
	recipe := a == aimKeyed && rng.Float64() < 1.0/3
	if recipe {
		fault = callproxy.Fault{Lock: name, Mode: callproxy.Late, Delay: dur(rng, 150*time.Millisecond, 500*time.Millisecond)}
	}
	// The client whose request is faulted, and its request's options: a lease
	// longer than the settle window, so that a hold nobody knows of shows.
	client1 := r.agent()
	o := client.AcquireOptions{TTL: dur(rng, 4*time.Second, 8*time.Second), Owner: client1.label()}
	var t ticket
	switch a {
	case aimKeyed, aimPlain:
		if a == aimKeyed {
			o.IdempotencyKey = client.NewIdempotencyKey()
		}
		// Half the time no wait (a 423: a keyed client then asks again with
		// its key now and then), else a wait, a ticket, or both.
		switch p := rng.Float64(); {
		case p < 0.5 || recipe:
		case p < 0.65:
			o.Wait = dur(rng, 300*time.Millisecond, 1500*time.Millisecond)
		case p < 0.85:
			o.Fair = true
		default:
			o.Fair, o.Wait = true, dur(rng, 300*time.Millisecond, 1500*time.Millisecond)
		}
	case aimPoll:
		o.Fair = true
		if rng.IntN(2) == 0 {
			o.IdempotencyKey = client.NewIdempotencyKey()
		}
		res, op := client1.acquireIdem(name, o)
		if op.Outcome != check.Queued {
			client1.leave(bg, name, res, op)
			holder.releaseAll(name, lease, count)
			return
		}
		t = ticket{id: res.Ticket.ID, owner: o.Owner, asked: op.Call}
	case aimRelease:
		if rng.IntN(3) == 0 {
			if l, op := holder.reenter(name, lease.ID, 2*time.Second, false); op.Outcome == check.OK {
				count = l.Count
			}
		}
	}

	// Now and then the store's retry of the call is faulted too: then Baton
	// has no answer for its client (a 503).
	p := r.top.calls[server]
	var amu sync.Mutex // armed grows while the clients' goroutines read it
	armed := []*callproxy.Armed{p.Arm(fault)}
	switch {
	case recipe:
		armed = append(armed, p.Arm(callproxy.Fault{Lock: name, Mode: callproxy.Stall,
			Delay: dur(rng, 2200*time.Millisecond, 3*time.Second), Skip: 1}))
	case rng.Float64() < 0.4:
		armed = append(armed, p.Arm(pickFault(rng, name)))
	}
	armedNow := func() []*callproxy.Armed {
		amu.Lock()
		defer amu.Unlock()
		return append([]*callproxy.Armed(nil), armed...)
	}
	first := armed[0]
	// Now and then the call that comes next once the faulted request has
	// its answer is delayed too: mostly what Baton does in the background
	// for it (an undo, an unpoll), which a copy of the faulted call then
	// overtakes.
	var faulter *agent
	if a == aimRelease {
		faulter = holder
	} else {
		faulter = client1
	}
	firstAnswer := make(chan struct{})
	follow := rng.Float64() < 0.4 && !recipe
	then := callproxy.Fault{Lock: name, Mode: callproxy.Stall, Delay: dur(rng, 2200*time.Millisecond, 3*time.Second)}
	if rng.IntN(2) == 0 {
		then = callproxy.Fault{Lock: name, Mode: callproxy.Late, Delay: dur(rng, time.Second, 3*time.Second)}
	}
	faulter.then = func(check.Op) {
		faulter.then = nil
		if follow {
			amu.Lock()
			armed = append(armed, p.Arm(then))
			amu.Unlock()
		}
		close(firstAnswer)
	}
	armedAt := time.Now()
	var wg sync.WaitGroup
	released := make(chan struct{})
	// Another client asks for the lock, with a wait, once the holder has
	// released it: at once, or once the faulted calls have run (a late
	// copy's grant, and a retry's replay of it, come first then), while the
	// faulted client goes on. Were a hold some client was told of still
	// alive, this one's grant would be a second holder.
	other, later, orng := r.agent(), rng.Float64() < 0.6, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-released
		if later {
			for _, x := range armedNow() {
				if _, hit := x.Result(); !hit {
					continue
				}
				select {
				case <-x.Done():
				case <-time.After(x.Fault().Delay + 2*time.Second):
				}
			}
			time.Sleep(dur(orng, 0, 500*time.Millisecond))
		}
		ores, oop := other.acquire(name, client.AcquireOptions{TTL: dur(orng, 300*time.Millisecond, 800*time.Millisecond),
			Owner: other.label(), Wait: dur(orng, 1*time.Second, 2*time.Second)})
		if oop.Outcome == check.OK {
			from, to := check.GrantWindow(oop)
			other.hold(bg, name, ores.Lease, from, to, 500*time.Millisecond)
		}
	}()
	if a == aimRelease {
		// The holder's release is the faulted request.
		holder.pinned = server
		holder.releaseAll(name, lease, count)
		close(released)
	} else {
		answered := make(chan struct{})
		pause := dur(rng, 0, fault.Delay+300*time.Millisecond)
		hrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())) // the holder's goroutine's own
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(released)
			// The holder lets go at a random moment around the faulted call
			// and its copy; in the recipe, right after the first answer.
			if recipe {
				pause = dur(hrng, 0, 100*time.Millisecond)
				select {
				case <-firstAnswer:
				case <-time.After(2500 * time.Millisecond):
				}
			} else {
				select {
				case <-first.Hit():
				case <-answered:
				case <-time.After(2500 * time.Millisecond):
				}
			}
			time.Sleep(pause)
			holder.releaseAll(name, lease, count)
		}()
		client1.pinned = server
		r.faulted(bg, client1, rng, name, o, t, a, recipe)
		close(answered)
	}
	wg.Wait()
	faulter.then = nil
	for _, x := range armedNow() {
		if !p.Disarm(x) {
			select {
			case <-x.Done():
			case <-time.After(x.Fault().Delay + probeTimeout):
			}
		}
		h, hit := x.Result()
		log.add(callFault{aim: a, server: server, armed: armedAt, hit: h, wasHit: hit})
	}
}

// faulted makes the faulted request (an acquire, or the poll of ticket t) and
// plays its client out: now and then it hangs up in the middle of the
// request and never comes back; else a lost answer to a keyed acquire is
// sent again with its key until answered (acquireIdem), and whatever it got
// is held and released, polled, or left (a 423).
func (r *trial) faulted(ctx context.Context, c *agent, rng *rand.Rand, name string, o client.AcquireOptions, t ticket, a aim,
	recipe bool) {
	hang := rng.Float64() < 0.2 && !recipe
	after := dur(rng, 0, 2500*time.Millisecond)
	if a == aimPoll {
		wait := dur(rng, 300*time.Millisecond, 1500*time.Millisecond)
		if hang {
			c.hangPoll(ctx, name, t, wait, after)
			return
		}
		c.await(ctx, name, t, o.TTL)
		return
	}
	// A client with a key sends it again, with the same body, after a lost
	// answer until it is answered; and most, wanting the lock, after a 423
	// too for a while (a 423 made nothing: its retry is a fresh attempt).
	// One about to hang up that got its answer first carries on as the others.
	busyFor := time.Duration(0)
	if o.IdempotencyKey != "" && rng.Float64() < 0.7 {
		busyFor = dur(rng, 500*time.Millisecond, 3*time.Second)
	}
	if recipe {
		busyFor = 3500 * time.Millisecond
	}
	var res *client.AcquireResult
	var op check.Op
	var first time.Time
	for try := 1; ; try++ {
		if try == 1 && hang {
			var timer *time.Timer
			res, op = c.acquireHanging(name, o, func(h *hanger) { timer = time.AfterFunc(after, h.hangUp) })
			timer.Stop()
			if op.HungUp {
				c.leave(ctx, name, res, op) // and never comes back
				return
			}
		} else {
			res, op = c.acquireTry(name, o, nil, try, first)
		}
		if try == 1 {
			first = op.Call
		}
		if o.IdempotencyKey == "" {
			break
		}
		if op.Outcome == check.Unknown && time.Since(first) < idemRetryFor {
			c.backoff()
			continue
		}
		if op.Outcome == check.Busy && time.Since(first) < busyFor {
			pause := dur(rng, 100*time.Millisecond, 300*time.Millisecond)
			if recipe {
				pause = dur(rng, 400*time.Millisecond, 900*time.Millisecond)
			}
			time.Sleep(pause)
			continue
		}
		break
	}
	switch op.Outcome {
	case check.OK:
		from, to := check.GrantWindow(op)
		c.hold(ctx, name, res.Lease, from, to, time.Second)
	case check.Queued:
		asked := op.Call
		if !op.TicketCall.IsZero() {
			asked = op.TicketCall
		}
		c.await(ctx, name, ticket{id: res.Ticket.ID, owner: o.Owner, asked: asked}, o.TTL)
	}
}

// stray arms a fault on the next call on a lock of the workload, through
// either Baton process, and waits for it to be used (or withdraws it after
// 2 s). From the call to its end, a late watch is excused: a stalled or late
// call (a release, an expiry's handoff) moves the lock late.
func (r *trial) stray(ctx context.Context, rng *rand.Rand, log *callLog) {
	server := rng.IntN(len(r.top.calls))
	fault := pickFault(rng, r.locks[rng.IntN(len(r.locks))])
	p := r.top.calls[server]
	armed := p.Arm(fault)
	armedAt := time.Now()
	select {
	case <-armed.Hit():
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
	if p.Disarm(armed) {
		return
	}
	select {
	case <-armed.Done():
	case <-time.After(fault.Delay + 10*time.Second):
	}
	h, _ := armed.Result()
	log.add(callFault{aim: aimStray, server: server, armed: armedAt, hit: h, wasHit: true})
	r.span(h.At, time.Now(), slowed, "script call faulted ("+fault.Mode.String()+")")
}

// reportCalls sums the faults up in the details, and writes them all to
// faults.txt in the scenario's directory.
func (r *trial) reportCalls(log *callLog) {
	log.mu.Lock()
	faults := append([]callFault(nil), log.faults...)
	log.mu.Unlock()
	sort.Slice(faults, func(i, j int) bool { return faults[i].armed.Before(faults[j].armed) })
	type tally struct {
		armed, hit int
		modes      map[callproxy.Mode]int
		scripts    map[string]int // the faulted calls' scripts
		replies    map[string]int // the faulted calls' replies, as Redis gave them
	}
	var by [aims]tally
	for i := range by {
		by[i] = tally{modes: map[callproxy.Mode]int{}, scripts: map[string]int{}, replies: map[string]int{}}
	}
	var b strings.Builder
	for _, f := range faults {
		t := &by[f.aim]
		t.armed++
		if !f.wasHit {
			fmt.Fprintf(&b, "%s %-26s %s via %s: armed, no call came\n", f.armed.Format("15:04:05.000"), aimNames[f.aim],
				f.hit.Lock, r.top.batons[f.server].name)
			continue
		}
		t.hit++
		t.modes[f.hit.Mode]++
		reply := f.hit.Reply
		if f.hit.Ran.IsZero() {
			reply = "(never ran)"
		}
		t.replies[reply]++
		script := f.hit.Name
		if script == "" {
			script = short8(f.hit.Script)
		}
		t.scripts[script]++
		fmt.Fprintf(&b, "%s %-26s %s via %s: %s %v, %s %s, read %s, client side closed %s, sent %s, ran %s: %s\n",
			f.armed.Format("15:04:05.000"), aimNames[f.aim], f.hit.Lock, r.top.batons[f.server].name, f.hit.Mode, f.hit.Delay,
			f.hit.Command, script, clockOf(f.hit.At), clockOf(f.hit.Closed), clockOf(f.hit.Sent),
			clockOf(f.hit.Ran), reply)
	}
	for i, t := range by {
		if t.armed == 0 {
			continue
		}
		r.note("script-call faults at %s: %d armed, %d hit (%d late, %d lost replies, %d stalls) on %s; the faulted calls answered in Redis: %s",
			aimNames[i], t.armed, t.hit, t.modes[callproxy.Late], t.modes[callproxy.LostReply], t.modes[callproxy.Stall],
			counts(t.scripts), counts(t.replies))
	}
	p := filepath.Join(r.dir, "faults.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err == nil {
		r.note("every script-call fault: %s", p)
	}
}

// counts lists a tally, most frequent first.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ", ")
}

func clockOf(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

func short8(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
