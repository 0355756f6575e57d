package main

import (
	"bufio"
	"context"
	"net"
	"slices"
	"sync"
	"time"
)

// redisBackGoal is the goal for the time from a killed Redis answering PING
// again to each Baton process's first 2xx that needed it: p99 at
// most this.
const redisBackGoal = 100 * time.Millisecond

// backProbe is how often the runner asks, while it waits for Redis and Baton
// to come back after a kill.
const backProbe = 2 * time.Millisecond

// watchRedisBack starts timing a Redis kill's recovery, from the moment the
// killed Redis at addr is gone (call it then): the first PING it answers, and
// each Baton process's first 2xx to a read of a lock's state, which Baton
// serves from Redis only (so none can come before Redis is back). done stops
// the timing, at most probeTimeout after the start, and returns each Baton
// process's time from PING to that 2xx (none for a process that gave no 2xx).
func (r *trial) watchRedisBack(addr string) (done func() []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	var wg sync.WaitGroup
	var pingAt time.Time
	okAt := make([]time.Time, len(r.top.cls))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if ping(addr) {
				pingAt = time.Now()
				return
			}
			time.Sleep(backProbe)
		}
	}()
	for i, cl := range r.top.cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_, err := cl.State(rctx, "redis-back")
				rcancel()
				if err == nil {
					okAt[i] = time.Now()
					return
				}
				time.Sleep(backProbe)
			}
		}()
	}
	return func() []time.Duration {
		wg.Wait()
		cancel()
		var out []time.Duration
		for _, t := range okAt {
			if !t.IsZero() && !pingAt.IsZero() {
				out = append(out, max(0, t.Sub(pingAt)))
			}
		}
		return out
	}
}

// ping reports whether the Redis at addr answers PING with PONG (not LOADING),
// on a connection of its own: go-redis's pool, after failed dials, tries
// again only once a second.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// quantile is the q-quantile (0 < q <= 1) of ds, nearest rank; 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}
