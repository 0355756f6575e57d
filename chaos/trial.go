package main

import (
	"context"
	"fmt"
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
	rec    check.Recorder
	tal    tally
	locks  []string
	res    map[string]*check.Resource // one per lock
	probes int

	mu        sync.Mutex
	faults    int
	recovery  []time.Duration
	faultErrs []string
}

// fault waits for the service to recover from a fault that ended at since, and
// counts it.
func (r *trial) fault(since time.Time) {
	d, err := r.recovered(since)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults++
	if err != nil {
		r.faultErrs = append(r.faultErrs, err.Error())
		return
	}
	r.recovery = append(r.recovery, d)
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
	faults        int
	inconclusive  int      // locks whose check timed out: neither legal nor not
	summary       string   // what happened, in a line
	details       []string // what the violations were, and other findings
}

// runScenario runs one scenario on a fresh topology in dir and judges it.
func runScenario(ctx context.Context, cfg *config, sc scenario, bin, dir string) (row, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row{}, err
	}
	env := append([]string{"BATON_TICKET_TTL=" + cfg.ticketTTL.String()}, sc.batonEnv...)
	top, err := startTopology(dir, bin, 2, sc.redisArgs, env, sc.proxied)
	if err != nil {
		return row{}, err
	}
	defer top.stop()
	r := &trial{cfg: cfg, top: top, res: map[string]*check.Resource{}}
	for i := range cfg.locks {
		name := sc.name + "-" + strconv.Itoa(i)
		r.locks = append(r.locks, name)
		r.res[name] = &check.Resource{}
	}
	if err := r.drive(ctx, sc); err != nil {
		return row{}, fmt.Errorf("%s: %w", sc.name, err)
	}
	out := row{name: sc.name, faults: r.faults, recovery: r.recovery,
		requests: r.tal.requests.Load(), answered: r.tal.answered.Load()}
	for _, e := range r.faultErrs {
		out.violations++
		out.details = append(out.details, "did not recover: "+e)
	}
	leaks, err := awaitNoLeaks(ctx, top.rdb, cfg.settle)
	if err != nil {
		return row{}, fmt.Errorf("%s: leak check: %w", sc.name, err)
	}
	for _, k := range leaks {
		out.violations++
		out.details = append(out.details, "key left in Redis after the locks finished: "+k)
	}
	r.judge(&out, dir)
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
		w := newWorker(i, r.cfg, r.top.cls, &r.rec, &r.tal, r.locks, r.res)
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

// judge checks the history and reads the resources into out.
func (r *trial) judge(out *row, dir string) {
	ops := r.rec.Ops()
	grants, unknown, losses := 0, 0, 0
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
	out.summary = fmt.Sprintf("%d faults (%d with data loss), %d grants, %d outcomes unknown, %d writes accepted; "+
		"porcupine checked %d operations over %d locks in %v",
		r.faults, losses, grants, unknown, writes, res.Checked, res.Locks, took.Round(time.Millisecond))
	if r.cfg.keep || out.violations > 0 || out.staleAccepted > 0 || out.inconclusive > 0 {
		p := filepath.Join(dir, "history.txt")
		if err := writeHistory(p, ops); err == nil {
			out.details = append(out.details, "full history: "+p)
		}
	}
}

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
