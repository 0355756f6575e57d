package main

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// sharedRound queues n shared fair tickets on name behind an exclusive holder,
// has every one of them wait for its grant, then releases the holder: one release
// grants the whole run. It returns the time from the moment the release was sent
// to the moment the first, and the last, of the n saw its grant.
type sharedRound func(ctx context.Context, name string, n int) (first, last time.Duration, err error)

// sharedSystem is a system of the shared scenario.
type sharedSystem struct {
	system string
	// pair takes a shared hold on name and releases it; many at once on one name
	// hold the lock together.
	pair  pairFunc
	round sharedRound
	pids  []int // the serving side, whose CPU is counted
}

// sharedRun is one run's figures: the pairs of sharedClients clients on one
// lock, and rounds of a run of queued shared tickets.
type sharedRun struct {
	pairs             uncRun
	firstP50, lastP50 float64
	lastP99           float64
	rounds            int
}

// sharedRounds runs rounds of n tickets, each on a lock of its own.
func sharedRounds(ctx context.Context, round sharedRound, n, rounds int, tag string) (sharedRun, error) {
	first, last := newHist(), newHist()
	for i := range rounds {
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		f, l, err := round(rctx, fmt.Sprintf("%s-%d", tag, i), n)
		cancel()
		if err != nil {
			return sharedRun{}, fmt.Errorf("round %d: %w", i, err)
		}
		record(first, f)
		record(last, l)
	}
	return sharedRun{firstP50: quantileMs(first, 50), lastP50: quantileMs(last, 50), lastP99: quantileMs(last, 99), rounds: rounds}, nil
}

// runSharedAll measures each system's shared holds, runs times, the systems
// interleaved within each run, and keeps the median of each figure.
func runSharedAll(ctx context.Context, e *env, cfg config, res *results) error {
	systems, closeSystems, err := e.sharedSystems(ctx)
	if err != nil {
		return err
	}
	defer closeSystems()
	runs := map[string][]sharedRun{}
	for r := range cfg.runs {
		for _, s := range systems {
			lock := fmt.Sprintf("s%d-pairs", r)
			pair := func(ctx context.Context, _ string) error { return s.pair(ctx, lock) }
			u, err := uncontended(ctx, target{s.system, pair, s.pids}, cfg.sharedClients, cfg.sharedWarmup, cfg.sharedDuration, 0, lock)
			if err != nil {
				return fmt.Errorf("%s pairs: %w", s.system, err)
			}
			sr, err := sharedRounds(ctx, s.round, cfg.sharedTickets, cfg.sharedRounds, fmt.Sprintf("s%d-run", r))
			if err != nil {
				return fmt.Errorf("%s run of %d tickets: %w", s.system, cfg.sharedTickets, err)
			}
			sr.pairs = u
			runs[s.system] = append(runs[s.system], sr)
			fmt.Printf("shared run %d/%d %-12s %d clients: %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair; "+
				"%d tickets granted by one release: first p50 %6.3f ms, last p50 %6.3f ms  p99 %6.3f ms (%d rounds)\n",
				r+1, cfg.runs, s.system, cfg.sharedClients, u.ops, u.p50, u.p99, u.cpuPerOp,
				cfg.sharedTickets, sr.firstP50, sr.lastP50, sr.lastP99, sr.rounds)
		}
	}
	for _, s := range systems {
		rs := runs[s.system]
		pick := func(f func(sharedRun) float64) float64 {
			xs := make([]float64, len(rs))
			for i, x := range rs {
				xs[i] = f(x)
			}
			return median(xs)
		}
		row := sharedRow{
			Scenario: "shared", System: s.system, Clients: cfg.sharedClients,
			OpsPerSec:    round(pick(func(x sharedRun) float64 { return x.pairs.ops }), 0),
			P50:          round(pick(func(x sharedRun) float64 { return x.pairs.p50 }), 3),
			P99:          round(pick(func(x sharedRun) float64 { return x.pairs.p99 }), 3),
			ServerCPU:    round(pick(func(x sharedRun) float64 { return x.pairs.cpuPerOp }), 1),
			Tickets:      cfg.sharedTickets,
			FirstP50:     round(pick(func(x sharedRun) float64 { return x.firstP50 }), 3),
			LastP50:      round(pick(func(x sharedRun) float64 { return x.lastP50 }), 3),
			LastP99:      round(pick(func(x sharedRun) float64 { return x.lastP99 }), 3),
			Rounds:       len(rs) * cfg.sharedRounds,
			generatorCPU: pick(func(x sharedRun) float64 { return x.pairs.genCPU }),
		}
		res.Shared = append(res.Shared, row)
		fmt.Printf("shared %-12s median of %d: %8.0f pairs/s  p50 %6.2f ms  p99 %6.2f ms  server %6.1f µs/pair; run of %d: last p50 %6.3f ms  p99 %6.3f ms\n",
			s.system, len(rs), row.OpsPerSec, row.P50, row.P99, row.ServerCPU, row.Tickets, row.LastP50, row.LastP99)
	}
	return nil
}

// spread is the earliest and the latest of times, each less from.
func spread(from time.Duration, times []time.Duration) (first, last time.Duration) {
	return slices.Min(times) - from, slices.Max(times) - from
}
