package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// pairFunc acquires and releases one lock name, nobody else wanting it.
type pairFunc func(ctx context.Context, name string) error

// target is a system under test for the uncontended scenario.
type target struct {
	system string
	pair   pairFunc
	pids   []int         // the serving side, whose CPU is counted
	proc   int           // the server process of pids apart from Redis (Baton, hello), counted alone too; 0 for none
	redis  *redis.Client // the Redis it runs on, whose own count of its CPU (INFO) is read too; nil for none

	// worker, when set, replaces pair: each worker calls it once, before the
	// warm-up, for a pair of its own (a client that keeps state across pairs,
	// such as etcd's lease-reusing one), and calls done when the run ends.
	worker func(ctx context.Context) (pair pairFunc, done func(), err error)
	// durability is the cell of the 2x2 durability table: memory or durable.
	durability string
	// concurrency are the concurrencies it runs at
	concurrency []int
}

// uncRun is one run's figures.
type uncRun struct {
	ops, p50, p99, cpuPerOp, genCPU float64
	procCPU, redisCPU               float64 // µs per pair: target.proc's, and Redis's by INFO
	errors                          int64
	firstErr                        error
}

// cpuSample is what the serving side and this process have used of the CPU so
// far: all of target.pids, target.proc alone, Redis by its own count, and the
// load generator.
type cpuSample struct{ server, proc, redis, gen time.Duration }

func (t target) sample(ctx context.Context) (s cpuSample, err error) {
	if s.server, err = cpuTimes(t.pids); err != nil {
		return s, err
	}
	if t.proc != 0 {
		if s.proc, err = cpuTime(t.proc); err != nil {
			return s, err
		}
	}
	if t.redis != nil {
		if s.redis, err = redisCPU(ctx, t.redis); err != nil {
			return s, err
		}
	}
	s.gen, _ = cpuTime(os.Getpid())
	return s, nil
}

// uncontended runs c workers that acquire and release distinct names for
// warmup+duration and measures the part after the warmup. Closed-loop: each worker
// starts its next pair when the last one ends, and a pair's latency runs from its
// start. Open-loop (rate > 0): pair k is due at start + k/rate, whatever the
// workers are doing, and its latency runs from that intended start, so a slow
// server is not hidden by the generator waiting for it (no coordinated omission).
func uncontended(ctx context.Context, t target, c int, warmup, duration time.Duration, rate float64, tag string) (uncRun, error) {
	start := time.Now()
	from := start.Add(warmup)
	end := from.Add(duration)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second))
	defer cancel()

	var seq atomic.Int64
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	hists := make([]*hdrhistogram.Histogram, c)
	counts := make([]int64, c)
	var errs atomic.Int64
	var errOnce sync.Once
	var firstErr error

	var cpu0, cpu1 cpuSample
	var cpuErr error
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		time.Sleep(time.Until(from))
		cpu0, cpuErr = t.sample(runCtx)
		time.Sleep(time.Until(end))
		if cpuErr == nil {
			cpu1, cpuErr = t.sample(runCtx)
		}
	}()

	var wg sync.WaitGroup
	for w := range c {
		hists[w] = newHist()
		wg.Add(1)
		go func() {
			defer wg.Done()
			pair := t.pair
			if t.worker != nil {
				p, done, err := t.worker(runCtx)
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					return
				}
				defer done()
				pair = p
			}
			name := make([]byte, 0, 64)
			prefix := tag + "-" + strconv.Itoa(w) + "-"
			for i := 0; runCtx.Err() == nil; i++ {
				var due time.Time
				if interval > 0 {
					due = start.Add(time.Duration(seq.Add(1)-1) * interval)
					if due.After(end) {
						return
					}
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				} else {
					due = time.Now()
					if due.After(end) {
						return
					}
				}
				name = strconv.AppendInt(append(name[:0], prefix...), int64(i), 10)
				err := pair(runCtx, string(name))
				done := time.Now()
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				if due.Before(from) || done.After(end) {
					continue
				}
				counts[w]++
				record(hists[w], done.Sub(due))
			}
		}()
	}
	wg.Wait()
	<-cpuDone
	if err := ctx.Err(); err != nil {
		return uncRun{}, err
	}
	h := newHist()
	var n int64
	for w := range c {
		h.Merge(hists[w])
		n += counts[w]
	}
	r := uncRun{errors: errs.Load(), firstErr: firstErr}
	if n == 0 {
		return r, fmt.Errorf("%s c=%d: no pair completed (%d errors; first: %v)", t.system, c, r.errors, firstErr)
	}
	if r.errors*100 > n {
		return r, fmt.Errorf("%s c=%d: %d errors in %d pairs; first: %w", t.system, c, r.errors, n, firstErr)
	}
	if cpuErr != nil {
		return r, fmt.Errorf("read server cpu: %w", cpuErr)
	}
	r.ops = float64(n) / duration.Seconds()
	r.p50, r.p99 = quantileMs(h, 50), quantileMs(h, 99)
	perPair := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	r.cpuPerOp = perPair(cpu1.server - cpu0.server)
	r.procCPU = perPair(cpu1.proc - cpu0.proc)
	r.redisCPU = perPair(cpu1.redis - cpu0.redis)
	r.genCPU = 100 * (cpu1.gen - cpu0.gen).Seconds() / duration.Seconds()
	return r, nil
}

// runUncontendedAll measures every system at every concurrency of its
// durability cell, runs times, the systems interleaved within each run so that
// drift over the run treats them alike, and keeps the median of each figure,
// and of the share of the machine's CPU other processes took meanwhile.
func runUncontendedAll(ctx context.Context, e *env, cfg config, res *results) error {
	targets, closeTargets, err := e.targets(ctx)
	if err != nil {
		return err
	}
	defer closeTargets()
	type key struct {
		sys, dur string
		c        int
	}
	runs := map[key][]uncRun{}
	loads := map[key][]float64{}
	for r := range cfg.runs {
		for _, t := range targets {
			for _, c := range t.concurrency {
				tag := fmt.Sprintf("u%d-%s-c%d", r, t.durability, c)
				m := e.mark()
				u, err := uncontended(ctx, t, c, cfg.warmup, cfg.duration, cfg.rate, tag)
				if err != nil {
					return fmt.Errorf("%s (%s): %w", t.system, t.durability, err)
				}
				other := e.otherLoad(m, e.mark())
				k := key{t.system, t.durability, c}
				runs[k] = append(runs[k], u)
				loads[k] = append(loads[k], other)
				extra := ""
				if u.errors > 0 {
					extra = fmt.Sprintf("  (%d errors, first: %v)", u.errors, u.firstErr)
				}
				fmt.Printf("uncontended run %d/%d %-12s %-7s c=%-3d %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair%s  generator CPU %3.0f%%  other_load %4.1f%%%s\n",
					r+1, cfg.runs, t.system, t.durability, c, u.ops, u.p50, u.p99, u.cpuPerOp, cpuSplit(u.procCPU, u.redisCPU), u.genCPU, other, extra)
			}
		}
	}
	for _, t := range targets {
		for _, c := range t.concurrency {
			k := key{t.system, t.durability, c}
			rs := runs[k]
			pick := func(f func(uncRun) float64) float64 {
				xs := make([]float64, len(rs))
				for i, u := range rs {
					xs[i] = f(u)
				}
				return median(xs)
			}
			row := uncontendedRow{
				Scenario: "uncontended", System: t.system, Durability: t.durability, Concurrency: c,
				OpsPerSec:    round(pick(func(u uncRun) float64 { return u.ops }), 0),
				P50:          round(pick(func(u uncRun) float64 { return u.p50 }), 3),
				P99:          round(pick(func(u uncRun) float64 { return u.p99 }), 3),
				ServerCPU:    round(pick(func(u uncRun) float64 { return u.cpuPerOp }), 1),
				ProcessCPU:   round(pick(func(u uncRun) float64 { return u.procCPU }), 1),
				RedisCPU:     round(pick(func(u uncRun) float64 { return u.redisCPU }), 1),
				OtherLoad:    round(median(loads[k]), 1),
				generatorCPU: pick(func(u uncRun) float64 { return u.genCPU }),
			}
			res.Uncontended = append(res.Uncontended, row)
			fmt.Printf("uncontended %-12s %-7s c=%-3d median of %d: %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair%s  other_load %4.1f%%\n",
				t.system, t.durability, c, len(rs), row.OpsPerSec, row.P50, row.P99, row.ServerCPU, cpuSplit(row.ProcessCPU, row.RedisCPU), row.OtherLoad)
		}
	}
	return nil
}

// cpuSplit is " (process X, Redis Y)": the parts of the server CPU per pair
// measured apart, when there are any.
func cpuSplit(proc, redis float64) string {
	var parts []string
	if proc > 0 {
		parts = append(parts, fmt.Sprintf("process %.1f", proc))
	}
	if redis > 0 {
		parts = append(parts, fmt.Sprintf("Redis %.1f", redis))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
