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

// targets are the systems of the uncontended scenario, in table order.
func (e *env) targets(ctx context.Context) ([]target, func(), error) {
	var ts []target
	var variants []authVariant
	if e.cfg.wantSystem(sysBaton) {
		ts = append(ts, target{sysBaton, batonPair(client.New(e.batonURL), 0), e.batonPIDs()})
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
				ts = append(ts, target{v.system, batonPair(c, 0), []int{v.proc.pid(), e.redisPID}})
			}
		}
	}
	rdb := newRedisClient(e.redis.Addr())
	closeAll := func() {
		rdb.Close()
		stopAuthVariants(variants)
	}
	if e.cfg.wantSystem(sysEtcd) {
		ts = append(ts, target{sysEtcd, newEtcdClient(e.etcdURL).pair, []int{e.etcd.pid()}})
	}
	if e.cfg.wantSystem(sysRedislock) {
		ts = append(ts, target{sysRedislock, newRedislockLocker(rdb, redislockPrefix).pair, []int{e.redisPID}})
	}
	if e.cfg.wantSystem(sysRedisScript) {
		ts = append(ts, target{sysRedisScript, newScriptLocker(rdb, scriptPrefix).pair, []int{e.redisPID}})
	}
	// Load the scripts before the first measured call.
	if err := newScriptLocker(rdb, scriptPrefix).pair(ctx, "warm"); err != nil {
		closeAll()
		return nil, nil, err
	}
	return ts, closeAll, nil
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
