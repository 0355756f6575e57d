package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorPrefix is the floor's key prefix on the shared redis-server.
const floorPrefix = "fl:"

// floorRelease deletes a key only while it holds the caller's token, as
// bsm/redislock's release does.
var floorRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// floorLocker is the least a Redis lock costs Redis: SET key token NX PX ttl, then
// a compare-and-delete script. (bsm/redislock obtains through a script of its
// own, so it is a little above this.)
type floorLocker struct {
	rdb    *redis.Client
	prefix string
	ttlMs  string
}

func newFloorLocker(rdb *redis.Client, prefix string) *floorLocker {
	return &floorLocker{rdb: rdb, prefix: prefix, ttlMs: strconv.FormatInt((30 * time.Second).Milliseconds(), 10)}
}

func (f *floorLocker) pair(ctx context.Context, name string) error {
	var b [16]byte
	_, _ = rand.Read(b[:])
	key, token := f.prefix+name, hex.EncodeToString(b[:])
	ok, err := f.rdb.Do(ctx, "set", key, token, "nx", "px", f.ttlMs).Result()
	if err != nil {
		return fmt.Errorf("floor set: %w", err)
	}
	if ok != "OK" {
		return fmt.Errorf("floor set %q: %v", name, ok)
	}
	n, err := floorRelease.Run(ctx, f.rdb, []string{key}, token).Int()
	if err != nil {
		return fmt.Errorf("floor release: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("floor release %q: not held", name)
	}
	return nil
}
