package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store estimates the Redis server's clock, to stamp every call that
// changes a lock with a "not after" on that clock (calls.go). The estimate is
// the offset between TIME and this process's clock, sampled at start, every
// clockEvery, and again at once when a call came back expired; its error
// bound is half the sample's round trip, plus drift since (clockDriftPPM).
// On a Redis Cluster every master has a clock of its own, sampled apart: a
// call's deadline is on the clock of the master of its lock's slot.

// callBudget is how long after it is stamped a call may still change
// anything: well under the client's 2 s read timeout, so that by the time an
// attempt times out its deadline has passed, and a broken connection is
// decided at most this long (plus the bound) after the call was sent.
const callBudget = 1500 * time.Millisecond

// A wide error bound costs only time, never safety: a call's deadline is
// taken to have passed on Redis only 2 bounds after it has on the estimate. So
// the store stamps with any bound up to maxClockError (past it a call could
// reach Redis already expired: it refuses, ErrUnavailable), and samples the
// clock again, in the background, once the bound passes resampleError.
const (
	maxClockError = callBudget / 2
	resampleError = 50 * time.Millisecond
)

// clockEvery is how often the offset is sampled; clockDriftPPM bounds how far
// the two clocks may drift apart between samples.
const (
	clockEvery    = 5 * time.Second
	clockDriftPPM = 1000
)

// redisClock is one server's clock: an estimate and when it was made.
type redisClock struct {
	mu       sync.Mutex // one sample at a time
	sample   atomic.Pointer[clockSample]
	sampling atomic.Bool // a background resample is under way
}

type clockSample struct {
	offset time.Duration // Redis time minus local time
	err    time.Duration // half the sample's round trip
	at     time.Time     // local time of the sample
}

// bound is the estimate's error bound at local time now.
func (c *clockSample) bound(now time.Time) time.Duration {
	return c.err + time.Millisecond + now.Sub(c.at)*clockDriftPPM/1_000_000
}

// stamp is the "not after" of one attempt: a Redis time, and the local time
// after which it has surely passed on that Redis.
type stamp struct {
	notAfter string
	passed   time.Time
}

// stamp stamps a call on key's Redis: its estimated time plus callBudget.
// Without an estimate it samples one first. Errors: ErrUnavailable when the
// clock cannot be read or the estimate's error bound is too wide.
func (s *Store) stamp(ctx context.Context, key string) (stamp, error) {
	clk, c := s.clockOf(key)
	if clk == nil && s.cluster != nil {
		// The store's slot map is not loaded yet: ask the cluster client.
		if node, err := s.cluster.MasterForKey(ctx, key); err == nil {
			v, _ := s.clocks.LoadOrStore(node.Options().Addr, &redisClock{})
			clk, c = v.(*redisClock), node
		}
	}
	if clk == nil {
		return stamp{}, fmt.Errorf("%w: no clock for the lock's master", ErrUnavailable)
	}
	cs := clk.sample.Load()
	if cs == nil {
		sampleClock(ctx, c, clk, true)
		if cs = clk.sample.Load(); cs == nil {
			return stamp{}, fmt.Errorf("%w: the Redis clock cannot be read", ErrUnavailable)
		}
	}
	now := time.Now()
	b := cs.bound(now)
	if b > resampleError && clk.sampling.CompareAndSwap(false, true) {
		go func() {
			defer clk.sampling.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			sampleClock(ctx, c, clk, false)
		}()
	}
	if b > maxClockError {
		return stamp{}, fmt.Errorf("%w: the Redis clock's estimate is off by up to %v", ErrUnavailable, b)
	}
	// Redis's time at the sample, plus the time since on this process's
	// monotonic clock: a step of its wall clock since changes nothing.
	notAfter := cs.at.Add(cs.offset + now.Sub(cs.at) + callBudget)
	return stamp{notAfter: strconv.FormatInt(notAfter.UnixMilli(), 10), passed: now.Add(callBudget + 2*b + time.Millisecond)}, nil
}

// syncClock samples the offset with TIME (of every master, on a cluster).
func (s *Store) syncClock(ctx context.Context) {
	if s.topo == nil {
		sampleClock(ctx, s.rdb, &s.clock, false)
		return
	}
	for _, addr := range s.topo.Masters() {
		v, _ := s.clocks.LoadOrStore(addr, &redisClock{})
		sampleClock(ctx, s.topo.Node(addr), v.(*redisClock), false)
	}
}

// sampleClock takes one sample. It replaces the last one when force is set
// (a call came back expired: the clock may have stepped), when it is the
// narrower of the two now, or when the last one is older than clockStale; a
// sample taken while the machine was slow (a wide round trip) does not spoil
// a good estimate.
func sampleClock(ctx context.Context, c redis.Cmdable, clk *redisClock, force bool) {
	clk.mu.Lock()
	defer clk.mu.Unlock()
	t0 := time.Now()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		return
	}
	t1 := time.Now()
	half := t1.Sub(t0) / 2
	cs := &clockSample{offset: tm.Sub(t0.Add(half)), err: half, at: t0.Add(half)}
	if last := clk.sample.Load(); !force && last != nil && t1.Sub(last.at) < clockStale && last.bound(t1) < cs.bound(t1) {
		return
	}
	clk.sample.Store(cs)
}

// clockStale is how old a sample may be and still be kept over a wider new one.
const clockStale = 30 * time.Second

// clockOf is the clock of the Redis that holds key, and a client of it; nil
// when the key's master is not known yet (a cluster's slot map not loaded).
func (s *Store) clockOf(key string) (*redisClock, redis.Cmdable) {
	if s.topo == nil {
		return &s.clock, s.rdb
	}
	addr := s.topo.Master(key)
	if addr == "" {
		return nil, nil
	}
	v, _ := s.clocks.LoadOrStore(addr, &redisClock{})
	return v.(*redisClock), s.topo.Node(addr)
}

// clockKnown reports whether there is an estimate (of every master, on a
// cluster whose slot map is loaded).
func (s *Store) clockKnown() bool {
	if s.topo == nil {
		return s.clock.sample.Load() != nil
	}
	masters := s.topo.Masters()
	for _, addr := range masters {
		v, ok := s.clocks.Load(addr)
		if !ok || v.(*redisClock).sample.Load() == nil {
			return false
		}
	}
	return len(masters) > 0
}

// syncNewClocks samples the clocks of the masters that have no estimate yet.
func (s *Store) syncNewClocks(ctx context.Context) {
	for _, addr := range s.topo.Masters() {
		v, _ := s.clocks.LoadOrStore(addr, &redisClock{})
		if clk := v.(*redisClock); clk.sample.Load() == nil {
			sampleClock(ctx, s.topo.Node(addr), clk, false)
		}
	}
}

// runClock samples the offset until the store closes; on a cluster, also a
// master's as soon as the slot map names one it has no estimate of (a
// promoted replica).
func (s *Store) runClock() {
	changed := make(chan struct{}, 1)
	if s.topo != nil {
		s.topo.Listen(func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.syncClock(ctx)
	cancel()
	t := time.NewTicker(clockEvery)
	defer t.Stop()
	for {
		select {
		case <-s.shutdown:
			return
		case <-changed:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.syncNewClocks(ctx)
			cancel()
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.syncClock(ctx)
			if s.secretKey.Load() != nil || len(s.opt.Secret) > 0 {
				_ = s.syncSecret(ctx) // Redis may have restarted empty: give it the secret back
			}
			cancel()
		}
	}
}

// handoffLatency is how long ago, by this process's clock, the grant g on the
// lock key was made on its Redis's: the grant time moved to this clock by the
// offset, or, while there is no estimate, the time since its message arrived.
func (s *Store) handoffLatency(key string, g *grantMsg) time.Duration {
	clk, _ := s.clockOf(key)
	if clk == nil || clk.sample.Load() == nil {
		return time.Since(g.recv)
	}
	return max(time.Since(g.at.Add(-clk.sample.Load().offset)), 0)
}
