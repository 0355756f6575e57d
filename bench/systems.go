package main

import (
	"context"

	"github.com/bsm/redislock"

	"github.com/batonhq/baton/client"
)

// Key prefixes of the in-process Redis systems, apart from Baton's "baton".
const (
	scriptPrefix    = "rs"
	redislockPrefix = "rl:"
)

// targets are the systems of the uncontended scenario, in table order: the
// memory cell's, then the durable cell's (see config.durabilities).
func (e *env) targets(ctx context.Context) ([]target, func(), error) {
	var ts []target
	var variants []authVariant
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
		stopAuthVariants(variants)
	}
	mem, dur := e.cfg.concurrency, e.cfg.durableConcurrency
	if e.cfg.wantDurability(durMemory) {
		if e.cfg.wantSystem(sysBaton) {
			ts = append(ts, target{system: sysBaton, pair: batonPair(client.New(e.batonURL), 0), pids: e.batonPIDs(), proc: e.baton.pid(), redis: e.stats})
			if e.cfg.authCompare {
				var err error
				if variants, err = e.startAuthVariants(ctx); err != nil {
					return nil, nil, err
				}
				for _, v := range variants {
					c := client.New(v.url)
					if v.key != "" {
						c = keyClient(v.url, v.key)
					}
					ts = append(ts, target{system: v.system, pair: batonPair(c, 0), pids: []int{v.proc.pid(), e.redisPID}})
				}
			}
		}
		if e.ref != nil {
			ts = append(ts, target{system: sysBatonRef, pair: batonPair(client.New(e.refURL), 0), pids: []int{e.ref.pid(), e.redisPID}, proc: e.ref.pid(), redis: e.stats})
		}
		if e.hello != nil {
			ts = append(ts, target{system: sysHello, pair: batonPair(client.New(e.helloURL), 0), pids: []int{e.hello.pid()}, proc: e.hello.pid()})
		}
		if e.etcd != nil {
			ts = append(ts, etcdTargets(e.cfg, e.etcdURL, e.etcd.pid())...)
		}
		rdb := newRedisClient(e.redis.Addr())
		closers = append(closers, func() { rdb.Close() })
		onRedis := func(sys string, pair pairFunc) {
			if e.cfg.wantSystem(sys) {
				ts = append(ts, target{system: sys, pair: pair, pids: []int{e.redisPID}, redis: e.stats})
			}
		}
		onRedis(sysFloor, newFloorLocker(rdb, floorPrefix).pair)
		onRedis(sysRedislock, newRedislockLocker(rdb, redislockPrefix).pair)
		onRedis(sysRedisScript, newScriptLocker(rdb, scriptPrefix).pair)
		// Load the scripts before the first measured call.
		if err := newScriptLocker(rdb, scriptPrefix).pair(ctx, "warm"); err != nil {
			closeAll()
			return nil, nil, err
		}
		for i := range ts {
			ts[i].durability, ts[i].concurrency = durMemory, mem
		}
	}
	if e.cfg.wantDurability(durDurable) {
		n := len(ts)
		if e.batonAOF != nil && e.cfg.wantSystem(sysBaton) {
			ts = append(ts, target{system: sysBaton, pair: batonPair(client.New(e.batonAOFURL), 0), pids: []int{e.batonAOF.pid(), e.redisAOFPID},
				proc: e.batonAOF.pid(), redis: e.statsAOF})
		}
		if e.etcdDisk != nil {
			ts = append(ts, etcdTargets(e.cfg, e.etcdDiskURL, e.etcdDisk.pid())...)
		}
		if e.redisAOF != nil && e.cfg.wantSystem(sysRedisScript) {
			rdb := newRedisClient(e.redisAOF.Addr())
			closers = append(closers, func() { rdb.Close() })
			ts = append(ts, target{system: sysRedisScript, pair: newScriptLocker(rdb, scriptPrefix).pair, pids: []int{e.redisAOFPID}, redis: e.statsAOF})
			if err := newScriptLocker(rdb, scriptPrefix).pair(ctx, "warm"); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
		for i := n; i < len(ts); i++ {
			ts[i].durability, ts[i].concurrency = durDurable, dur
		}
	}
	return ts, closeAll, nil
}

// etcdTargets are etcd's two client styles on the etcd at url: one-shot (lease
// grant, lock, unlock, revoke: 4 calls a pair) and lease-reusing (one lease per
// client, granted before the warm-up: lock and unlock, 2 calls a pair).
func etcdTargets(cfg config, url string, pid int) []target {
	var ts []target
	if cfg.wantSystem(sysEtcd) {
		ts = append(ts, target{system: sysEtcd, pair: newEtcdClient(url).pair, pids: []int{pid}})
	}
	if cfg.wantSystem(sysEtcdLease) {
		ts = append(ts, target{system: sysEtcdLease, worker: newEtcdClient(url).leaseWorker, pids: []int{pid}})
	}
	return ts
}

// handoffRounds are the systems of the handoff scenario. redislock is in, with a
// 1 ms retry, because it has no queue: its inversions are reported as they are.
// redis-script is Baton's fair queue without HTTP: the floor Baton can approach.
func (e *env) handoffRounds(context.Context) ([]systemRound, func(), error) {
	var rs []systemRound
	rdb := newRedisClient(e.redis.Addr())
	if e.cfg.wantSystem(sysBaton) {
		rs = append(rs, systemRound{sysBaton, batonHandoff(client.New(e.batonURL), e.batonURL)})
	}
	if e.ref != nil {
		rs = append(rs, systemRound{sysBatonRef, batonHandoff(client.New(e.refURL), e.refURL)})
	}
	if e.cfg.wantSystem(sysEtcd) {
		rs = append(rs, systemRound{sysEtcd, etcdHandoff(newEtcdClient(e.etcdURL))})
	}
	if e.cfg.wantSystem(sysRedislock) {
		rs = append(rs, systemRound{sysRedislock, redislockHandoff(redislock.New(rdb), redislockPrefix)})
	}
	if e.cfg.wantSystem(sysRedisScript) {
		rs = append(rs, systemRound{sysRedisScript, scriptHandoff(rdb, newScriptLocker(rdb, scriptPrefix))})
	}
	return rs, func() { rdb.Close() }, nil
}

// expiryReps are the systems of the expiry_handoff scenario: Baton and etcd.
// redislock has no waiting of its own to measure, and redis-script is not a
// service.
func (e *env) expiryReps(context.Context) ([]systemExpiry, func(), error) {
	var rs []systemExpiry
	if e.cfg.wantSystem(sysBaton) {
		rs = append(rs, systemExpiry{sysBaton, batonExpiry(client.New(e.batonURL), e.cfg.expiryTTL)})
	}
	if e.cfg.wantSystem(sysEtcd) {
		rs = append(rs, systemExpiry{sysEtcd, etcdExpiry(newEtcdClient(e.etcdURL))})
	}
	return rs, func() {}, nil
}
