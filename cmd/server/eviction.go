package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// evictionCheckTimeout bounds the look at Redis's eviction policy at start.
const evictionCheckTimeout = 5 * time.Second

// warnEviction logs a warning for each Redis (every master of a Cluster) whose
// maxmemory-policy may evict keys: every policy but noeviction. A lock's keys
// have a TTL, so the volatile-* policies evict them as readily as allkeys-*:
// a lock would vanish while its holder is told it holds it, and its fence
// could start over. Where CONFIG is not allowed (some managed services rename
// it) nothing can be told, which is logged at debug level.
func warnEviction(ctx context.Context, rdb redis.UniversalClient, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	check := func(ctx context.Context, c *redis.Client) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			log.Debug().Err(err).Msg("cannot read Redis's maxmemory-policy (CONFIG GET): check yourself that it is noeviction")
			return nil
		}
		if policy := cfg["maxmemory-policy"]; policy != "" && policy != "noeviction" {
			log.Warn().Str("redis", c.Options().Addr).Str("maxmemory_policy", policy).Str("maxmemory", cfg["maxmemory"]).
				Msg("Redis's maxmemory-policy evicts keys when memory runs out: it could evict a held lock (its holder still believes it holds it) " +
					"and its fence counter. Set maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy noeviction); " +
					"then a full Redis refuses new locks instead")
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, c)
	}
}
