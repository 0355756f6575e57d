package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// checkKeys checks what the workload left in Redis. Once the workload has
// ended, every hold, ticket and queue must be gone within settle
// (awaitNoLeaks): at that moment the locks have finished. Then each name's key
// (which keeps its fence) may outlive its last grant, hold and ticket by
// BATON_FENCE_GUARD and no more, and nothing else of the name may be left at
// all but the records of the Idempotency-Keys that made holds or tickets
// there, for BATON_IDEMPOTENCY_GRACE after what they made ended (README,
// Guarantees: "Nothing stays behind"); so fenceGuard after the locks finished
// (plus guardSlack for the runner's own reading) no key but a record may be
// left, and the grace after, none. Each key left is a violation, reported
// once, with its type and remaining ttl.
func (r *trial) checkKeys(ctx context.Context, out *row) error {
	leaks, err := awaitNoLeaks(ctx, r.top.rdb, r.cfg.settle)
	if err != nil {
		return err
	}
	reported := map[string]bool{}
	shown := map[string]int{} // details per kind of key: the first maxKeys
	for _, k := range leaks {
		out.violations++
		reported[k.name] = true
		if shown[k.kind()]++; shown[k.kind()] <= maxKeys {
			out.details = append(out.details, "key left in Redis after the locks finished: "+k.String())
		}
	}
	finished := time.Now()
	lingers := isRecord
	left, err := awaitKeys(ctx, r.top.rdb, r.cfg.fenceGuard+guardSlack, lingers)
	if err != nil {
		return err
	}
	// A record lives the grace after what its key made ended, before the
	// locks finished.
	late, err := awaitKeys(ctx, r.top.rdb, max(r.cfg.idemGrace-time.Since(finished), 0)+guardSlack,
		func(k string) bool { return !lingers(k) })
	if err != nil {
		return err
	}
	left = append(left, late...)
	after := time.Since(finished).Round(time.Millisecond)
	for _, k := range left {
		if reported[k.name] {
			continue
		}
		out.violations++
		if shown[k.kind()]++; shown[k.kind()] <= maxKeys {
			out.details = append(out.details, fmt.Sprintf("%s left in Redis %v after the locks finished (BATON_FENCE_GUARD %v, BATON_IDEMPOTENCY_GRACE %v): %s",
				k.kind(), after, r.cfg.fenceGuard, r.cfg.idemGrace, k))
		}
	}
	for _, kind := range []string{"key", "lock key", "idempotency record"} {
		if n := shown[kind]; n > maxKeys {
			out.details = append(out.details, fmt.Sprintf("(and %d more, %d in all, of the kind: %s)", n-maxKeys, n, kind))
		}
	}
	return nil
}

// maxKeys is how many keys left of each kind the details show.
const maxKeys = 5

// guardSlack is how much longer than the fence guard the last lock key may
// take to be seen gone: Redis expires a key at its deadline (a read of an expired
// key finds nothing), so this is only the runner's own pace.
const guardSlack = 500 * time.Millisecond

// awaitNoLeaks waits up to settle for Redis to hold no hold, ticket or queue of
// Baton's: once the workload has ended, every lease, ticket and queue runs out
// within the longest lease and poll plus two ticket ttls (a ticket's life, then
// an unclaimed grant's window). Locks' keys that record no live hold and the
// Idempotency-Keys' records (P:{N}:i:<key hash>) are left to the guard check.
// It returns the keys still there at the end.
func awaitNoLeaks(ctx context.Context, rdb redis.UniversalClient, settle time.Duration) ([]key, error) {
	return awaitKeys(ctx, rdb, settle, func(k string) bool {
		return (isLock(k) && !holds(ctx, rdb, k)) || isRecord(k) || isDeployment(k)
	})
}

// isDeployment reports the keys of the deployment rather than of a lock name:
// the idempotency secret and its fingerprint (store/secret.go), which live as
// long as the deployment (README, Guarantees: "One key per deployment holds
// the idempotency secret").
func isDeployment(k string) bool { return k == keyPrefix+":secret" || k == keyPrefix+":secret:fp" }

// isLock reports a lock's own key (P:{N}), which keeps its fence for
// BATON_FENCE_GUARD after its last grant.
func isLock(k string) bool { return strings.HasSuffix(k, "}") }

// holds reports whether the lock's key k records an exclusive hold whose
// deadline has not passed (lua/lib.lua: 'f|w|qe|n|l|m|sx|x', x a hold record
// whose second field is its deadline). Shared holds, queues and tickets have
// keys of their own.
func holds(ctx context.Context, rdb redis.UniversalClient, k string) bool {
	v, err := rdb.Get(ctx, k).Result()
	if err != nil {
		return false
	}
	parts := strings.SplitN(v, "|", 8)
	if len(parts) < 8 || parts[7] == "" {
		return false
	}
	rec := strings.SplitN(parts[7], "\t", 3)
	if len(rec) < 2 {
		return true
	}
	d, _ := strconv.ParseInt(rec[1], 10, 64)
	now, err := rdb.Time(ctx).Result()
	return err != nil || d >= now.UnixMilli()
}

// isRecord reports an Idempotency-Key's record (lua/lib.lua: P:{N}:i:<key
// hash>), which lives BATON_IDEMPOTENCY_GRACE after what its key made ended.
func isRecord(k string) bool { return strings.Contains(k, "}:i:") }

// key is a key of Baton's found in Redis.
type key struct {
	name, typ string
	pttl      time.Duration
}

func (k key) String() string { return fmt.Sprintf("%s (%s, pttl %v)", k.name, k.typ, k.pttl) }

// kind names what a key is, for the report.
func (k key) kind() string {
	switch {
	case isLock(k.name):
		return "lock key"
	case isRecord(k.name):
		return "idempotency record"
	}
	return "key"
}

// awaitKeys waits up to wait for Redis to hold no key of Baton's but those
// skip skips, and returns those still there then.
func awaitKeys(ctx context.Context, rdb redis.UniversalClient, wait time.Duration, skip func(string) bool) ([]key, error) {
	deadline := time.Now().Add(wait)
	for {
		left, err := keysLeft(ctx, rdb, skip)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			return left, err
		}
		time.Sleep(100 * time.Millisecond) // expiry is only visible by asking
	}
}

// keysLeft lists Baton's keys but those skip skips and the deployment's own;
// in a cluster, every master's.
func keysLeft(ctx context.Context, rdb redis.UniversalClient, skip func(string) bool) ([]key, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return keysOn(ctx, rdb, rdb, skip)
	}
	var mu sync.Mutex
	var left []key
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		l, err := keysOn(ctx, m, rdb, skip)
		mu.Lock()
		left = append(left, l...)
		mu.Unlock()
		return err
	})
	return left, err
}

// keysOn lists the keys one node (scan) holds, reading each through rdb.
func keysOn(ctx context.Context, scan, rdb redis.Cmdable, skip func(string) bool) ([]key, error) {
	var left []key
	iter := scan.Scan(ctx, 0, keyPrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if skip(k) || isDeployment(k) {
			continue
		}
		pttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if pttl == -2*time.Nanosecond { // gone meanwhile (go-redis reports -2 as -2ns)
			continue
		}
		typ, _ := rdb.Type(ctx, k).Result()
		left = append(left, key{name: k, typ: typ, pttl: pttl})
	}
	return left, iter.Err()
}
