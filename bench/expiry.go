package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// expiryRep makes a holder that vanishes (never releases) and a waiter behind it,
// and returns the time from the holder's lease end to the waiter's grant. It
// returns errLate when the waiter could not be sent at least expiryLead before
// the lease end (this machine too busy): such a waiter was not waiting, and its
// figure would measure the delay in sending it instead.
type expiryRep func(ctx context.Context, name string) (time.Duration, error)

const expiryLead = 50 * time.Millisecond

var errLate = errors.New("waiter sent too close to the holder's lease end")

// expiry runs reps repetitions, started stagger apart so that a few overlap
// (independent locks) and the run stays short, and returns p50 and p99 in ms.
func expiry(ctx context.Context, rep expiryRep, reps int, stagger time.Duration, tag string) (p50, p99 float64, late int, err error) {
	h := newHist()
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
			lat, err := rep(rctx, fmt.Sprintf("%s-%d", tag, k))
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, errLate) {
				late++
				return
			}
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			record(h, max(lat, 0))
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, 0, late, first
	}
	if late*2 > reps {
		return 0, 0, late, fmt.Errorf("%d of %d waiters sent too late to wait: the machine is too busy", late, reps)
	}
	return quantileMs(h, 50), quantileMs(h, 99), late, nil
}

// etcdExpiry: the holder's lease has etcd's minimum TTL (it raises 1 s to its
// minimum, 2 s by default) and no keep-alive. Its end is taken as the grant
// response's arrival plus the TTL on this machine's clock, a little later than
// etcd's own (set when it applied the grant), so etcd's figure is if anything
// flattered.
func etcdExpiry(ec *etcdClient) expiryRep {
	return func(ctx context.Context, name string) (time.Duration, error) {
		hl, ttl, err := ec.grant(ctx, 1)
		if err != nil {
			return 0, err
		}
		end := time.Now().Add(time.Duration(ttl) * time.Second)
		if _, err := ec.lock(ctx, name, hl); err != nil {
			return 0, err
		}
		wl, _, err := ec.grant(ctx, 60)
		if err != nil {
			return 0, err
		}
		defer func() { _ = ec.revoke(context.WithoutCancel(ctx), wl) }()
		if time.Until(end) < expiryLead {
			return 0, errLate
		}
		key, err := ec.lock(ctx, name, wl)
		if err != nil {
			return 0, err
		}
		lat := time.Since(end)
		return lat, ec.unlock(ctx, key)
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
		measured := 0
		for r := range cfg.runs {
			p50, p99, late, err := expiry(ctx, sr.rep, n, cfg.expiryStagger, fmt.Sprintf("e%d", r))
			if err != nil {
				return fmt.Errorf("%s: %w", sr.system, err)
			}
			p50s, p99s = append(p50s, p50), append(p99s, p99)
			measured += n - late
			fmt.Printf("expiry_handoff run %d/%d %-12s %d holders vanished: p50 %7.2f ms  p99 %7.2f ms  (%d waiters sent too late to count)\n",
				r+1, cfg.runs, sr.system, n, p50, p99, late)
		}
		row := expiryRow{Scenario: "expiry_handoff", System: sr.system, P50: round(median(p50s), 3), P99: round(median(p99s), 3), reps: measured}
		res.Expiry = append(res.Expiry, row)
		fmt.Printf("expiry_handoff %-12s median of %d: p50 %7.2f ms  p99 %7.2f ms\n", sr.system, cfg.runs, row.P50, row.P99)
	}
	return nil
}

type systemExpiry struct {
	system string
	rep    expiryRep
}
