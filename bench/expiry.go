package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// expiryRep makes a holder that vanishes (never releases) and a waiter behind it,
// and returns what it saw of the time from the holder's lease end to the
// waiter's grant, on this machine's clock for every system alike. It returns
// errLate when the waiter could not be sent at least expiryLead before the lease
// end (this machine too busy): such a waiter was not waiting, and its figure
// would measure the delay in sending it instead.
type expiryRep func(ctx context.Context, name string) (expiryObs, error)

// expiryObs is one repetition, every time on this machine's monotonic clock.
type expiryObs struct {
	// lat is the waiter's answer's arrival minus the lease end taken as the
	// holder's answer's arrival plus the lease's TTL as the answer gave it. The
	// true end is a little earlier (the server started the lease before it
	// answered), so lat flatters every system alike, and it may come out
	// negative when the holder's answer took longer to arrive than the waiter's:
	// it is kept as it is, never clipped.
	lat time.Duration
	// early: the waiter's answer arrived before the holder's request was sent
	// plus the TTL, a lower bound of the true lease end. The waiter was granted
	// while the holder's lease was still running: a safety bug.
	early bool
}

// observe makes an expiryObs from the holder's request sent at sent, its answer
// received at got with ttl remaining, and the waiter's answer received at won.
func observe(sent, got time.Time, ttl time.Duration, won time.Time) expiryObs {
	return expiryObs{lat: won.Sub(got.Add(ttl)), early: won.Before(sent.Add(ttl))}
}

const expiryLead = 50 * time.Millisecond

var errLate = errors.New("waiter sent too close to the holder's lease end")

// expiryResult is one run of repetitions: latencies in ms, signed.
type expiryResult struct {
	p50, p99, min float64
	negative      int // repetitions whose latency came out below 0
	early         int // grants before the lease end: bugs
	late          int // waiters sent too late to count
}

// expiry runs reps repetitions, started stagger apart so that a few overlap
// (independent locks) and the run stays short.
func expiry(ctx context.Context, rep expiryRep, reps int, stagger time.Duration, tag string) (expiryResult, error) {
	var res expiryResult
	var lats []time.Duration
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	start := time.Now()
	for k := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(time.Duration(k) * stagger)))
			rctx, cancel := context.WithTimeout(ctx, roundTimeout)
			defer cancel()
			o, err := rep(rctx, fmt.Sprintf("%s-%d", tag, k))
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, errLate) {
				res.late++
				return
			}
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			lats = append(lats, o.lat)
			if o.lat < 0 {
				res.negative++
			}
			if o.early {
				res.early++
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return res, first
	}
	if res.late*2 > reps {
		return res, fmt.Errorf("%d of %d waiters sent too late to wait: the machine is too busy", res.late, reps)
	}
	slices.Sort(lats)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res.p50, res.p99, res.min = ms(rank(lats, 50)), ms(rank(lats, 99)), ms(lats[0])
	return res, nil
}

// rank is the q-th percentile (0-100) of sorted xs by nearest rank.
func rank(xs []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q/100*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// etcdExpiry: the holder's lease has etcd's minimum TTL (it raises 1 s to its
// minimum, 2 s by default) and no keep-alive.
func etcdExpiry(ec *etcdClient) expiryRep {
	return func(ctx context.Context, name string) (expiryObs, error) {
		sent := time.Now()
		hl, ttl, err := ec.grant(ctx, 1)
		if err != nil {
			return expiryObs{}, err
		}
		got := time.Now()
		end := got.Add(time.Duration(ttl) * time.Second)
		if _, err := ec.lock(ctx, name, hl); err != nil {
			return expiryObs{}, err
		}
		wl, _, err := ec.grant(ctx, 60)
		if err != nil {
			return expiryObs{}, err
		}
		defer func() { _ = ec.revoke(context.WithoutCancel(ctx), wl) }()
		if time.Until(end) < expiryLead {
			return expiryObs{}, errLate
		}
		key, err := ec.lock(ctx, name, wl)
		if err != nil {
			return expiryObs{}, err
		}
		o := observe(sent, got, time.Duration(ttl)*time.Second, time.Now())
		return o, ec.unlock(ctx, key)
	}
}

// runExpiryAll measures Baton and etcd, runs times each, keeping the medians.
func runExpiryAll(ctx context.Context, e *env, cfg config, res *results) error {
	reps, closeReps, err := e.expiryReps(ctx)
	if err != nil {
		return err
	}
	defer closeReps()
	for _, sr := range reps {
		n := cfg.expiryReps
		if sr.system == sysEtcd {
			n = cfg.etcdExpiryReps
		}
		var p50s, p99s []float64
		measured, negative, early := 0, 0, 0
		lowest := math.Inf(1)
		for r := range cfg.runs {
			x, err := expiry(ctx, sr.rep, n, cfg.expiryStagger, fmt.Sprintf("e%d", r))
			if err != nil {
				return fmt.Errorf("%s: %w", sr.system, err)
			}
			p50s, p99s = append(p50s, x.p50), append(p99s, x.p99)
			measured += n - x.late
			negative += x.negative
			early += x.early
			lowest = min(lowest, x.min)
			fmt.Printf("expiry_handoff run %d/%d %-12s %d holders vanished: p50 %7.2f ms  p99 %7.2f ms  min %7.2f ms  (%d negative, %d granted before the lease end, %d waiters sent too late to count)\n",
				r+1, cfg.runs, sr.system, n, x.p50, x.p99, x.min, x.negative, x.early, x.late)
		}
		row := expiryRow{Scenario: "expiry_handoff", System: sr.system, P50: round(median(p50s), 3), P99: round(median(p99s), 3),
			Min: round(lowest, 3), Negative: negative, Early: early, reps: measured, Clock: "client"}
		res.Expiry = append(res.Expiry, row)
		if early > 0 {
			res.failures = append(res.failures, fmt.Sprintf("expiry_handoff: %s granted %d waiter(s) before the holder's lease could have ended (a safety bug)", sr.system, early))
		}
		fmt.Printf("expiry_handoff %-12s median of %d: p50 %7.2f ms  p99 %7.2f ms  min %7.2f ms  %d negative  %d early\n", sr.system, cfg.runs, row.P50, row.P99, row.Min, negative, early)
	}
	return nil
}

type systemExpiry struct {
	system string
	rep    expiryRep
}
