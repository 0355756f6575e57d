package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// awaitNoLeaks waits up to settle for Redis to hold no key of Baton's but fences:
// once the workload has ended, every lease, ticket and queue runs out within the
// longest lease and poll plus two ticket ttls (a ticket's life, then an unclaimed
// grant's window). It returns the keys still there at the end, each with its type
// and remaining ttl.
func awaitNoLeaks(ctx context.Context, rdb *redis.Client, settle time.Duration) ([]string, error) {
	deadline := time.Now().Add(settle)
	for {
		left, err := nonFenceKeys(ctx, rdb)
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			return left, err
		}
		time.Sleep(100 * time.Millisecond) // expiry is only visible by asking
	}
}

func nonFenceKeys(ctx context.Context, rdb *redis.Client) ([]string, error) {
	var left []string
	iter := rdb.Scan(ctx, 0, keyPrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasSuffix(k, ":fence") {
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
		left = append(left, fmt.Sprintf("%s (%s, pttl %v)", k, typ, pttl))
	}
	return left, iter.Err()
}
