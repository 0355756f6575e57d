package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
)

// The store estimates the Redis server's clock, to give every call that can
// grant a deadline on that clock after which it must change nothing ("not
// after"): a call whose client was told it failed (a timeout) may reach Redis
// much later (a TCP segment retransmitted after a partition heals), after its
// undo (abandon.lua) and its tombstone are long gone. The estimate is the
// offset between TIME and this process's clock, sampled at Ready and every
// clockEvery, and again at once when a call came back expired.

// callBudget is how long after it is sent a call may still run: the store's
// worst call (both attempts) and a margin for the clock estimate.
const callBudget = WorstCall + 2*time.Second

// clockEvery is how often the offset is sampled.
const clockEvery = 5 * time.Second

type redisClock struct {
	offset atomic.Int64 // Redis ms minus local ms
	known  atomic.Bool
}

// syncClock samples the offset with TIME.
func (s *Store) syncClock(ctx context.Context) {
	t0 := time.Now()
	tm, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return
	}
	mid := t0.Add(time.Since(t0) / 2)
	s.clock.offset.Store(tm.UnixMilli() - mid.UnixMilli())
	s.clock.known.Store(true)
}

// runClock samples the offset until the store closes.
func (s *Store) runClock() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.syncClock(ctx)
	cancel()
	t := time.NewTicker(clockEvery)
	defer t.Stop()
	for {
		select {
		case <-s.shutdown:
			return
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

// redisNow is the estimated Redis time, and whether there is an estimate.
func (s *Store) redisNow() (time.Time, bool) {
	if !s.clock.known.Load() {
		return time.Time{}, false
	}
	return time.Now().Add(time.Duration(s.clock.offset.Load()) * time.Millisecond), true
}

// notAfter is the "not after" argument of a call sent now: the estimated Redis
// time plus callBudget, or "" while there is no estimate.
func (s *Store) notAfter() string {
	now, ok := s.redisNow()
	if !ok {
		return ""
	}
	return strconv.FormatInt(now.Add(callBudget).UnixMilli(), 10)
}

// handoffLatency is how long ago, by this process's clock, the grant g was made
// on Redis's: the grant time moved to this clock by the offset, or, while there
// is no estimate, the time since its message arrived.
func (s *Store) handoffLatency(g *grantMsg) time.Duration {
	if !s.clock.known.Load() {
		return time.Since(g.recv)
	}
	return max(time.Since(g.at.Add(-time.Duration(s.clock.offset.Load())*time.Millisecond)), 0)
}
