package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton/chaos/check"
)

// scenario is one row of the table: a topology, a fault injected again and again
// while the workload runs, and what the checker is told about it.
type scenario struct {
	name      string
	redisArgs []string // extra redis-server arguments
	batonEnv  []string // extra BATON_* settings
	proxied   bool     // Baton reaches Redis through an in-process toxiproxy (net.go)
	calls     bool     // each Baton reaches Redis through a script-call fault proxy (callfaults.go)
	// inject injects the fault until ctx ends; nil for no fault. Each injection
	// waits for the service to recover (r.fault) before the next: recovery is
	// timed from the end of the fault, when the killed process is started again
	// (or at once, for a killed connection).
	inject func(ctx context.Context, r *trial) error
}

func scenarios() []scenario {
	return append([]scenario{
		{name: "baseline"},
		{name: "pubsub-kill", inject: killPubSub},
		{name: "redis-kill", inject: killRedis(true)},
		{name: "redis-kill-aof", redisArgs: []string{"--appendonly", "yes", "--appendfsync", "no"}, inject: killRedis(false)},
		{name: "baton-kill", inject: killBaton},
		{name: "slow-redis", inject: slowRedis},            // slow.go
		{name: "sigterm-mid-call", inject: sigtermMidCall}, // slow.go
		sentinelFailover(false), sentinelFailover(true),    // sentinel.go
		{name: "net-latency", proxied: true, inject: netLatency},
		{name: "net-reset", proxied: true, inject: netReset},
		{name: "net-blackhole-short", proxied: true, inject: netBlackhole(false)},
		{name: "net-blackhole-long", proxied: true, inject: netBlackhole(true)},
		{name: "net-stranded", proxied: true, inject: netStranded},
		{name: "call-faults", calls: true, inject: callFaults}, // callfaults.go
	}, clusterScenarios()...) // cluster.go
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f(); err != nil {
				return err
			}
		}
	}
}

// killPubSub closes every pub/sub connection to Redis (CLIENT KILL TYPE pubsub).
func killPubSub(ctx context.Context, r *trial) error {
	var kills []string
	defer func() { r.note("pub/sub connections killed at %s", strings.Join(kills, ", ")) }()
	return every(ctx, r.cfg.pubsubEvery, func() error {
		at := time.Now()
		kills = append(kills, at.Format("15:04:05.000"))
		if err := r.top.rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil && ctx.Err() == nil {
			return fmt.Errorf("client kill: %w", err)
		}
		r.fault(at, at, lostPubSub, "pub/sub connections killed")
		return nil
	})
}

// killRedis kills redis-server with SIGKILL and starts it again on the same port
// and directory, timing how soon each Baton process answers a 2xx once Redis
// answers PING (watchRedisBack). Without persistence every lock is gone: the history gets a Loss
// spanning the kill and the restart. With the AOF nothing acknowledged may be
// lost, and the history gets no Loss: a hold that vanished is a violation. The
// AOF is not fsynced (appendfsync no): Redis writes it to the kernel before it
// answers under every policy, and a killed process leaves the kernel's copy
// intact, so the kill loses what "always" would lose; but "always" holds every
// answer and every published message until the disk has synced, 100 to 300 ms
// at times on a loaded machine, and the watch check would judge the disk.
func killRedis(loss bool) func(context.Context, *trial) error {
	return func(ctx context.Context, r *trial) error {
		return every(ctx, r.cfg.redisEvery, func() error {
			killed := time.Now()
			r.top.redis.Kill()
			back := r.watchRedisBack(r.top.redis.Addr())
			time.Sleep(r.cfg.down)
			restarted := time.Now()
			err := r.top.redis.Restart()
			if loss {
				r.rec.Add(check.Op{Kind: check.Loss, Call: killed, Return: time.Now(), Outcome: check.OK, Client: -1})
			}
			if err != nil {
				back()
				return fmt.Errorf("restart redis: %w", err)
			}
			r.fault(killed, restarted, lostRedis, "redis-server killed")
			r.redisBack(back())
			return nil
		})
	}
}

// killBaton kills one Baton process (in turn) with SIGKILL once it has waiters
// in long-polls, and starts it again on the same port.
func killBaton(ctx context.Context, r *trial) error {
	n := 0
	var kills []string
	defer func() { r.note("Baton processes killed (SIGKILL) at %s", strings.Join(kills, ", ")) }()
	return every(ctx, r.cfg.batonEvery, func() error {
		i := n % len(r.top.batons)
		b := r.top.batons[i]
		n++
		for until := time.Now().Add(2 * time.Second); time.Now().Before(until) && b.gauge(ctx, "baton_waiters") < 1; {
			time.Sleep(10 * time.Millisecond) // a gauge: only visible by asking
		}
		killed := time.Now()
		r.crash(i, killed)
		kills = append(kills, killed.Format("15:04:05.000")+" ("+b.name+")")
		b.kill()
		time.Sleep(r.cfg.down)
		restarted := time.Now()
		if err := b.start(); err != nil {
			return err
		}
		r.fault(killed, restarted, onServer(i), "baton "+b.name+" killed")
		return nil
	})
}
