package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/chaos/check"
)

// trial is one run of a scenario.
type trial struct {
	cfg    *config
	top    *topology
	dir    string // the scenario's working directory
	rec    check.Recorder
	tal    tally
	locks  []string                   // the workload's
	race   []string                   // the races' (worker.race)
	aimed  []string                   // the aimed script-call faults' (callfaults.go)
	res    map[string]*check.Resource // one per lock
	modes  map[string]lockMode        // the locks that take shared holds (workload.go)
	probes int

	samp   *sampler
	rng    *rand.Rand // the fault injector's
	caller caller     // the fault injector's own requests (slow.go)

	mu        sync.Mutex
	faults    int
	recovery  []time.Duration
	back      []time.Duration // Redis kills: from PING answered to each Baton's first 2xx
	faultErrs []string
	spans     []check.Span  // the faults, each until the service recovered
	crashes   []check.Crash // Baton processes killed with SIGKILL
	// lostPubSub are the indexes in spans of faults that cost Baton its pub/sub
	// connections.
	lostPubSub []int
	notes      []string // findings of the fault injectors, for the details
}

// impact is what a fault kept from Baton, for the checks that excuse what
// happens meanwhile (check.Span).
type impact struct {
	redis bool // Redis itself (killed, frozen, out of reach, failing over)
	// pubsub: its pub/sub connections, back only some time after Redis is
	// (pubsubBack). Killed while Redis is up (pubsub-kill), they come back at
	// once: no late watch was seen there in 1,453 judged, quick and full.
	pubsub bool
	server int // the one Baton process it concerned, as 1 + its index; 0 for all
}

var (
	slowed     = impact{}                          // Redis answered, late (latency)
	lostPubSub = impact{}                          // the pub/sub connections were killed, Redis up
	lostRedis  = impact{redis: true, pubsub: true} // Redis was out of Baton's reach
)

// onServer is the impact of a fault that concerned Baton process i alone.
func onServer(i int) impact { return impact{server: i + 1} }

// fault waits for the service to recover from a fault that ran from start to
// end, counts it, and records it as a span until the recovery.
func (r *trial) fault(start, end time.Time, imp impact, what string) {
	d, err := r.recovered(end)
	if err != nil {
		d = probeTimeout
	}
	r.span(start, end.Add(d), imp, what)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults++
	if err != nil {
		r.faultErrs = append(r.faultErrs, err.Error())
		return
	}
	r.recovery = append(r.recovery, d)
}

// redisBack records how long each Baton process took to answer a 2xx after a
// killed Redis answered PING again (watchRedisBack).
func (r *trial) redisBack(ds []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.back = append(r.back, ds...)
}

// span records a stretch of time a fault disturbed the service. The watch
// check gets more (afterPubSub).
func (r *trial) span(from, to time.Time, imp impact, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, check.Span{From: from, To: to, Redis: imp.redis, Server: imp.server, What: what})
	if imp.pubsub {
		r.lostPubSub = append(r.lostPubSub, len(r.spans)-1)
	}
}

// crash records that Baton process i was killed with SIGKILL at at.
func (r *trial) crash(i int, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashes = append(r.crashes, check.Crash{Server: i, At: at})
}

// note records a finding of a fault injector for the details.
func (r *trial) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// row is one scenario's figures.
type row struct {
	name          string
	ops           int
	violations    int
	staleAccepted int
	staleRejected int
	requests      int64
	answered      int64
	recovery      []time.Duration
	redisBack     []time.Duration // Redis kills: from PING answered to each Baton's first 2xx
	faults        int
	inconclusive  int      // locks whose check timed out: neither legal nor not
	summary       string   // what happened, in a line
	details       []string // what the violations were, and other findings

	orphans check.OrphanResult
	unknown check.UnknownResult
	lost    check.LostResult
	watches check.WatchResult
	idem    check.IdemResult
	hungUp  int64
}

// runScenario runs one scenario on a fresh topology in dir and judges it.
func runScenario(ctx context.Context, cfg *config, sc scenario, bin, dir string) (row, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row{}, err
	}
	env := append([]string{"BATON_TICKET_TTL=" + cfg.ticketTTL.String(), "BATON_FENCE_GUARD=" + cfg.fenceGuard.String(),
		"BATON_IDEMPOTENCY_GRACE=" + cfg.idemGrace.String()},
		sc.batonEnv...)
	top, err := startTopology(dir, bin, topoOptions{batons: 2, redisArgs: sc.redisArgs, env: env, proxied: sc.proxied,
		calls: sc.calls, scope: sc.name})
	if err != nil {
		return row{}, err
	}
	defer top.stop()
	r := &trial{cfg: cfg, top: top, dir: dir, res: map[string]*check.Resource{},
		rng: rand.New(rand.NewPCG(cfg.seed, uint64(1<<32)))}
	r.caller = caller{id: -2, cls: top.cls, bases: top.bases, key: top.keys[runnerPrincipal], rec: &r.rec, tal: &r.tal,
		pick: func() int { return 0 }}
	for i := range cfg.locks {
		name := sc.name + "-" + strconv.Itoa(i)
		r.locks = append(r.locks, name)
		r.res[name] = &check.Resource{}
	}
	r.modes = lockModes(r.locks)
	for i := range raceLocks {
		r.race = append(r.race, sc.name+"-race-"+strconv.Itoa(i))
	}
	if sc.calls {
		for i := range aimLocks {
			name := sc.name + "-aim-" + strconv.Itoa(i)
			r.aimed = append(r.aimed, name)
			r.res[name] = &check.Resource{}
		}
	}
	sampled := append(append(r.locks[:len(r.locks):len(r.locks)], r.race...), r.aimed...)
	r.samp = startSampler(newSamplerClient(top.redis.Addr()), sampled)
	samples := sync.OnceValue(r.samp.close)
	defer samples() // the sampler stops on every return
	stalls := sync.OnceValue(startStallMeter().close)
	defer stalls()
	if err := r.drive(ctx, sc); err != nil {
		return row{}, fmt.Errorf("%s: %w", sc.name, err)
	}
	out := row{name: sc.name, faults: r.faults, recovery: r.recovery, redisBack: r.back,
		requests: r.tal.requests.Load(), answered: r.tal.answered.Load(), hungUp: r.tal.hungUp.Load()}
	for _, e := range r.faultErrs {
		out.violations++
		out.details = append(out.details, "did not recover: "+e)
	}
	out.details = append(out.details, r.notes...)
	if p := quantile(r.back, 0.99); p > redisBackGoal {
		out.details = append(out.details, fmt.Sprintf("Redis back to a 2xx: p99 %v, above the %v goal (not a violation)",
			p.Round(time.Millisecond), redisBackGoal))
	}
	if n := int(r.tal.refused.outside.Load()); n > 0 {
		out.violations += n
		out.details = append(out.details, "legitimate requests refused: "+r.tal.refused.String())
	}
	if err := r.checkKeys(ctx, &out); err != nil {
		return row{}, fmt.Errorf("%s: leak check: %w", sc.name, err)
	}
	r.judge(&out, dir, samples(), stalls())
	checkBatonGoroutines(ctx, top, &out, leakWait)
	return out, nil
}

// drive runs the workload for the configured time, injecting the scenario's
// fault meanwhile, and returns once every client has stopped.
func (r *trial) drive(ctx context.Context, sc scenario) error {
	wctx, stop := context.WithTimeout(ctx, r.cfg.duration)
	defer stop()
	var wg sync.WaitGroup
	for i := range r.cfg.clients {
		w := newWorker(i, r)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx) }()
	}
	for i := range r.cfg.watchers {
		w := newWatcher(r.cfg.clients+i, r.cfg, r.top.clientsOf(watchPrincipal), &r.rec, &r.tal, append(r.locks[:len(r.locks):len(r.locks)], r.race...))
		wg.Add(1)
		go func() { defer wg.Done(); w.run(wctx) }()
	}
	var faultErr error
	if sc.inject != nil {
		// The last fault leaves the workload time to run on a recovered service.
		fctx, fstop := context.WithTimeout(wctx, r.cfg.duration-r.cfg.tail)
		defer fstop()
		wg.Add(1)
		go func() { defer wg.Done(); faultErr = sc.inject(fctx, r) }()
	}
	wg.Wait()
	if faultErr != nil {
		return fmt.Errorf("inject: %w", faultErr)
	}
	return ctx.Err()
}

// judge checks the history, the holds nobody knew of and the watches, and reads
// the resources into out.
func (r *trial) judge(out *row, dir string, samples []check.Sample, stalls []check.Span) {
	ops := r.rec.Ops()
	grants, shared, unknown, losses := 0, 0, 0, 0
	for _, o := range ops {
		switch {
		case o.Kind == check.Loss:
			losses++
			continue // not a request
		case o.Outcome == check.Unknown:
			unknown++
		case o.Outcome == check.Invalid:
			out.violations++
			out.details = append(out.details, "answer outside the contract: "+o.String())
		case o.Outcome == check.OK && (o.Kind == check.Acquire || o.Kind == check.Poll):
			grants++
			if o.Shared {
				shared++
			}
		}
		out.ops++
	}
	start := time.Now()
	res := check.Check(ops, r.cfg.checkTimeout, dir)
	took := time.Since(start)
	for _, v := range res.Violations {
		out.violations++
		out.details = append(out.details, v.String())
	}
	out.inconclusive = len(res.Inconclusive)
	for _, l := range res.Inconclusive {
		out.details = append(out.details, fmt.Sprintf("check of lock %s inconclusive after %v", l, r.cfg.checkTimeout))
	}
	writes := 0
	names := append([]string(nil), r.locks...)
	sort.Strings(names)
	for _, n := range names {
		acc, stale, rej := r.res[n].Counts()
		writes += acc
		out.staleAccepted += stale
		out.staleRejected += rej
		for _, s := range r.res[n].Samples() {
			out.details = append(out.details, fmt.Sprintf("stale write accepted on %s at %s: lease %.8s fence %d, granted by %s, "+
				"after lease %.8s fence %d, granted from %s, had written", n, s.At.Format("15:04:05.000"),
				s.Writer.Lease, s.Writer.Fence, s.Writer.GrantTo.Format("15:04:05.000"),
				s.Newer.Lease, s.Newer.Fence, s.Newer.GrantFrom.Format("15:04:05.000")))
		}
	}
	r.mu.Lock()
	spans, crashes := append([]check.Span(nil), r.spans...), append([]check.Crash(nil), r.crashes...)
	watchSpans := afterPubSub(spans, r.lostPubSub)
	r.mu.Unlock()
	out.orphans = check.Orphans(ops, samples, r.cfg.ticketTTL, spans, stalls, crashes)
	for _, o := range out.orphans.Orphans {
		out.details = append(out.details, o.String())
	}
	for _, o := range out.orphans.GrantedGone {
		out.details = append(out.details, fmt.Sprintf("granted %v after its client had hung up, and answered: %s",
			o.AcquiredAt.Sub(o.HungAt).Round(time.Millisecond), o))
	}
	for _, o := range out.orphans.Crashed {
		out.details = append(out.details, "not counted, its Baton process was killed (SIGKILL) before it could undo it: "+o.String())
	}
	out.unknown = check.UnknownHolds(ops, samples, r.cfg.settleWindow, spans, crashes)
	out.violations += len(out.unknown.Over)
	for i, u := range out.unknown.Over {
		if i == maxLate {
			out.details = append(out.details, fmt.Sprintf("(and %d more holds nobody knew of beyond the settle window)", len(out.unknown.Over)-maxLate))
			break
		}
		out.details = append(out.details, fmt.Sprintf("beyond the settle window (%v): %s", r.cfg.settleWindow, u))
	}
	for _, u := range out.unknown.Crashed {
		out.details = append(out.details, "not counted, its Baton process was killed (SIGKILL) before it could end it: "+u.String())
	}
	out.lost = check.LostAnswers(ops, spans)
	out.violations += len(out.lost.Unsettled)
	out.details = append(out.details, out.lost.Unsettled...)
	out.watches = check.Watches(ops, samples, check.WatchBound+r.cfg.watchSlack, watchSpans, stalls)
	for i, l := range out.watches.Late {
		if i == maxLate {
			out.details = append(out.details, fmt.Sprintf("(and %d more late watches)", len(out.watches.Late)-maxLate))
			break
		}
		out.details = append(out.details, l.String())
	}
	out.violations += len(out.watches.Late)
	out.idem = check.Idempotency(ops, samples, r.cfg.idemGrace)
	out.violations += len(out.idem.Wrong)
	out.details = append(out.details, out.idem.Wrong...)
	out.summary = fmt.Sprintf("%d faults (%d with data loss), %d grants (%d shared), %d outcomes unknown (%d hung up), %d writes accepted; "+
		"porcupine checked %d operations over %d locks in %v; %d holds nobody knew of, %d orphans, the longest unknown %v; "+
		"%d hung-up requests answered with a grant; "+
		"%d watches judged (%d late only by the runner's own stalls, %d excused by faults, %d errors); %s; the runner stalled %d times, %v in all",
		r.faults, losses, grants, shared, unknown, out.hungUp, writes, res.Checked, res.Locks, took.Round(time.Millisecond),
		out.orphans.Unknown, out.orphans.Count(), out.unknown.Max.Round(time.Millisecond), out.orphans.Answered, out.watches.Judged, out.watches.Stalled, out.watches.Excused, out.watches.Errors,
		&r.tal.refused, len(stalls), total(stalls).Round(time.Millisecond))
	if sawNone(samples) && grants > 0 {
		out.inconclusive++
		out.details = append(out.details, fmt.Sprintf("the sampler never saw a hold, of %d grants: its reading (sampler.go, readHolds) "+
			"no longer matches how Redis keeps holds, and the checks of holds nobody knew of saw nothing", grants))
	}
	if r.cfg.keep || out.violations > 0 || out.staleAccepted > 0 || out.inconclusive > 0 || out.orphans.Count() > 0 {
		p := filepath.Join(dir, "history.txt")
		if err := writeHistory(p, ops); err == nil {
			out.details = append(out.details, "full history: "+p)
		}
		if out.orphans.Count() > 0 || len(out.unknown.Over) > 0 || len(out.watches.Late) > 0 || len(out.idem.Wrong) > 0 || r.cfg.keep {
			p := filepath.Join(dir, "samples.txt")
			if err := writeSamples(p, samples); err == nil {
				out.details = append(out.details, "the sampler's readings: "+p)
			}
		}
	}
}

// pubsubBack is how long after the service has recovered from a fault a watch
// may still be late: README, Guarantees, "No lost wake-ups": when the pub/sub
// connection was lost, waiters are handed a change "within about a second of it
// coming back". The recovery probe (a handoff on a lock subscribed afresh)
// shows that it is back; the channels the waiters were on before the fault are
// subscribed again after it, and only then do those waiters look. Seen: a watch
// 111 ms late, 830 ms after Redis restarted, while the probe had passed 20 ms
// before.
const pubsubBack = time.Second

// afterPubSub extends by pubsubBack the spans of faults that cost Baton its
// pub/sub connections (lost: their indexes), for the watch check.
func afterPubSub(spans []check.Span, lost []int) []check.Span {
	out := append([]check.Span(nil), spans...)
	for _, i := range lost {
		out[i].To = out[i].To.Add(pubsubBack)
	}
	return out
}

// raceLocks is how many locks the races have to themselves.
const raceLocks = 2

// maxLate is how many late watches the details show.
const maxLate = 10

func writeHistory(path string, ops []check.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, o := range ops {
		fmt.Fprintf(f, "%-14s %s\n", o.Lock, o)
	}
	return f.Close()
}

// writeSamples writes the sampler's readings of held locks, one a line.
func writeSamples(path string, samples []check.Sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, s := range samples {
		if s.Held {
			mode := "exclusive"
			if s.Shared {
				mode = "shared"
			}
			fmt.Fprintf(f, "%s %-14s fence=%d %s owner=%s granted=%s pttl=%v (read by %s)\n", s.Sent.Format("15:04:05.000000"),
				s.Lock, s.Fence, mode, s.Owner, s.GrantedAt.Format("15:04:05.000"), s.PTTL, s.Got.Format("15:04:05.000000"))
		}
	}
	return f.Close()
}

// sawNone reports whether no reading showed a hold.
func sawNone(samples []check.Sample) bool {
	for _, s := range samples {
		if s.Held {
			return false
		}
	}
	return true
}

// total is how long spans last in all.
func total(spans []check.Span) time.Duration {
	var d time.Duration
	for _, s := range spans {
		d += s.To.Sub(s.From)
	}
	return d
}
