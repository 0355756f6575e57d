package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store estimates the Redis server's clock, to give every call that can
// grant a deadline on that clock after which it must change nothing ("not
// after"): a call whose client was told it failed (a timeout) may reach Redis
// much later (a TCP segment retransmitted after a partition heals), after its
// undo (abandon.lua) and its tombstone are long gone. The estimate is the
// offset between TIME and this process's clock, sampled at Ready and every
// clockEvery, and again at once when a call came back expired. On a Redis
// Cluster every master has a clock of its own, sampled apart: a call's
// deadline is on the clock of the master of its lock's slot.

// callBudget is how long after it is sent a call may still run: the store's
// worst call (both attempts) and a margin for the clock estimate.
const callBudget = WorstCall + 2*time.Second

// clockEvery is how often the offset is sampled.
const clockEvery = 5 * time.Second

type redisClock struct {
	offset atomic.Int64 // Redis ms minus local ms
	known  atomic.Bool
}

// syncClock samples the offset with TIME (of every master, on a cluster).
func (s *Store) syncClock(ctx context.Context) {
	if s.topo == nil {
		sampleClock(ctx, s.rdb, &s.clock)
		return
	}
	for _, addr := range s.topo.masters() {
		v, _ := s.clocks.LoadOrStore(addr, &redisClock{})
		sampleClock(ctx, s.topo.node(addr), v.(*redisClock))
	}
}

func sampleClock(ctx context.Context, c redis.Cmdable, clk *redisClock) {
	t0 := time.Now()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		return
	}
	mid := t0.Add(time.Since(t0) / 2)
	clk.offset.Store(tm.UnixMilli() - mid.UnixMilli())
	clk.known.Store(true)
}

// clockOf is the clock of the Redis that holds key: nil while it has no
// estimate.
func (s *Store) clockOf(key string) *redisClock {
	clk := &s.clock
	if s.topo != nil {
		v, ok := s.clocks.Load(s.topo.master(key))
		if !ok {
			return nil
		}
		clk = v.(*redisClock)
	}
	if !clk.known.Load() {
		return nil
	}
	return clk
}

// clockKnown reports whether there is an estimate (of every master, on a
// cluster whose slot map is loaded).
func (s *Store) clockKnown() bool {
	if s.topo == nil {
		return s.clock.known.Load()
	}
	masters := s.topo.masters()
	for _, addr := range masters {
		v, ok := s.clocks.Load(addr)
		if !ok || !v.(*redisClock).known.Load() {
			return false
		}
	}
	return len(masters) > 0
}

// syncNewClocks samples the clocks of the masters that have no estimate yet.
func (s *Store) syncNewClocks(ctx context.Context) {
	for _, addr := range s.topo.masters() {
		v, _ := s.clocks.LoadOrStore(addr, &redisClock{})
		if clk := v.(*redisClock); !clk.known.Load() {
			sampleClock(ctx, s.topo.node(addr), clk)
		}
	}
}

// runClock samples the offset until the store closes; on a cluster, also a
// master's as soon as the slot map names one it has no estimate of (a
// promoted replica: until then its calls would go without a deadline).
func (s *Store) runClock() {
	changed := make(chan struct{}, 1)
	if s.topo != nil {
		s.topo.listen(func() {
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

// notAfter is the "not after" argument of a call sent now on the lock key:
// the estimated time of its Redis plus callBudget, or "" while there is no
// estimate.
func (s *Store) notAfter(key string) string {
	clk := s.clockOf(key)
	if clk == nil {
		return ""
	}
	now := time.Now().Add(time.Duration(clk.offset.Load()) * time.Millisecond)
	return strconv.FormatInt(now.Add(callBudget).UnixMilli(), 10)
}

// handoffLatency is how long ago, by this process's clock, the grant g on the
// lock key was made on its Redis's: the grant time moved to this clock by the
// offset, or, while there is no estimate, the time since its message arrived.
func (s *Store) handoffLatency(key string, g *grantMsg) time.Duration {
	clk := s.clockOf(key)
	if clk == nil {
		return time.Since(g.recv)
	}
	return max(time.Since(g.at.Add(-time.Duration(clk.offset.Load())*time.Millisecond)), 0)
}
