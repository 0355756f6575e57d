package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/bsm/redislock"
)

// chain follows one lock through a round of handoffs. Each holder notes the moment
// it sends its release (releasing) just before sending it; the next holder, the
// moment it sees its grant (granted). The lock serialises them, so each handoff is
// one grant time minus the release time before it.
type chain struct {
	base    time.Time
	lastRel atomic.Int64 // ns since base: when the current holder sent its release

	mu    sync.Mutex
	order []int // arrival indexes in grant order
	hist  *hdrhistogram.Histogram
}

func newChain(h *hdrhistogram.Histogram) *chain { return &chain{base: time.Now(), hist: h} }

func (c *chain) releasing() { c.lastRel.Store(int64(time.Since(c.base))) }

func (c *chain) granted(i int) {
	lat := time.Since(c.base) - time.Duration(c.lastRel.Load())
	c.mu.Lock()
	record(c.hist, lat)
	c.order = append(c.order, i)
	c.mu.Unlock()
}

// handoffRound queues n waiters on name behind a holder, in arrival order 0..n-1,
// then has the holder release; each waiter, once granted, releases at once.
type handoffRound func(ctx context.Context, name string, n int, ch *chain) error

// etcdSettle lets etcd's new lock watches catch up before the first release (see
// etcdHandoff).
const etcdSettle = 150 * time.Millisecond

// roundTimeout bounds one round, so that a lost grant fails the run instead of
// hanging it.
const roundTimeout = 60 * time.Second

type handoffRun struct {
	p50, p99   float64
	inversions int
	grants     int
}

// handoff runs rounds until at least samples handoffs are measured.
func handoff(ctx context.Context, round handoffRound, n, samples int, tag string) (handoffRun, error) {
	h := newHist()
	var r handoffRun
	for i := 0; r.grants < samples; i++ {
		ch := newChain(h)
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		err := round(rctx, fmt.Sprintf("%s-%d", tag, i), n, ch)
		cancel()
		if err != nil {
			return r, err
		}
		if len(ch.order) != n {
			return r, fmt.Errorf("round %d: %d of %d waiters granted", i, len(ch.order), n)
		}
		r.inversions += inversions(ch.order)
		r.grants += n
	}
	r.p50, r.p99 = quantileMs(h, 50), quantileMs(h, 99)
	return r, nil
}

// runHandoffAll measures each system's handoff at each queue length, runs times,
// keeping the median latencies and the total inversions over every grant.
func runHandoffAll(ctx context.Context, e *env, cfg config, res *results) error {
	rounds, closeRounds, err := e.handoffRounds(ctx)
	if err != nil {
		return err
	}
	defer closeRounds()
	for _, sr := range rounds {
		for _, n := range cfg.handoffWaiters {
			var p50s, p99s []float64
			inv, grants := 0, 0
			for r := range cfg.runs {
				hr, err := handoff(ctx, sr.round, n, cfg.handoffSamples, fmt.Sprintf("h%d-n%d", r, n))
				if err != nil {
					return fmt.Errorf("%s, %d waiters: %w", sr.system, n, err)
				}
				p50s, p99s = append(p50s, hr.p50), append(p99s, hr.p99)
				inv += hr.inversions
				grants += hr.grants
			}
			row := handoffRow{
				Scenario: "handoff", System: sr.system, Waiters: n,
				P50: round(median(p50s), 3), P99: round(median(p99s), 3), Inversions: inv, grants: grants,
			}
			res.Handoff = append(res.Handoff, row)
			fmt.Printf("handoff %-12s waiters=%-3d median of %d: p50 %7.3f ms  p99 %7.3f ms  inversions %d of %d grants\n",
				sr.system, n, cfg.runs, row.P50, row.P99, inv, grants)
		}
	}
	return nil
}

type systemRound struct {
	system string
	round  handoffRound
}

// etcdHandoff: each waiter takes its own lease and blocks in /v3/lock/lock; etcd
// grants in the order of the waiters' key revisions, so each waiter is started
// only once the one before it has its key in the queue.
//
// The holder releases etcdSettle after the last waiter queued. etcd's lock waits
// on a watch that starts at a past revision, and such a watch stays in etcd's
// "unsynced" group, served by a loop that runs every 100 ms, until that loop has
// caught it up; a release in the meantime reaches the waiter up to 100 ms late.
// Waiters queued for longer than that (the steady state of a busy lock) do not
// see this, so the settle flatters etcd rather than penalising it.
func etcdHandoff(ec *etcdClient) handoffRound {
	return func(ctx context.Context, name string, n int, ch *chain) error {
		holderLease, _, err := ec.grant(ctx, 60)
		if err != nil {
			return err
		}
		leases := []string{holderLease}
		defer func() {
			for _, l := range leases {
				_ = ec.revoke(context.WithoutCancel(ctx), l)
			}
		}()
		holderKey, err := ec.lock(ctx, name, holderLease)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errc := make(chan error, n)
		for i := range n {
			lease, _, err := ec.grant(ctx, 60)
			if err != nil {
				return err
			}
			leases = append(leases, lease)
			wg.Add(1)
			go func() {
				defer wg.Done()
				key, err := ec.lock(ctx, name, lease)
				if err != nil {
					errc <- err
					return
				}
				ch.granted(i)
				ch.releasing()
				if err := ec.unlock(ctx, key); err != nil {
					errc <- err
				}
			}()
			for {
				q, err := ec.queued(ctx, name)
				if err != nil {
					return err
				}
				if q >= i+2 {
					break
				}
				time.Sleep(200 * time.Microsecond) // nothing to wait on: etcd has no queue event
			}
		}
		time.Sleep(etcdSettle)
		ch.releasing()
		if err := ec.unlock(ctx, holderKey); err != nil {
			return err
		}
		wg.Wait()
		close(errc)
		return <-errc
	}
}

// redislockHandoff: redislock has no queue, so waiters retry every millisecond.
// A waiter arrives with its first, failed attempt; the next one starts only after
// that, so arrival order is well defined and inversions are real.
func redislockHandoff(rl *redislock.Client, prefix string) handoffRound {
	retry := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
	return func(ctx context.Context, name string, n int, ch *chain) error {
		key := prefix + name
		holder, err := rl.Obtain(ctx, key, time.Minute, nil)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		errc := make(chan error, n+1)
		for i := range n {
			arrived := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := rl.Obtain(ctx, key, time.Minute, nil)
				close(arrived)
				if !errors.Is(err, redislock.ErrNotObtained) {
					errc <- fmt.Errorf("first attempt of waiter %d: %v", i, err)
					return
				}
				l, err := rl.Obtain(ctx, key, time.Minute, retry)
				if err != nil {
					errc <- err
					return
				}
				ch.granted(i)
				ch.releasing()
				if err := l.Release(ctx); err != nil {
					errc <- err
				}
			}()
			<-arrived
		}
		ch.releasing()
		if err := holder.Release(ctx); err != nil {
			return err
		}
		wg.Wait()
		close(errc)
		return <-errc
	}
}
