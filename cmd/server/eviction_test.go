package main

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
)

// A Redis whose maxmemory-policy may evict keys (any but noeviction: locks
// have a TTL, so volatile-* evicts them too) is named in a warning that says
// how to fix it; noeviction is not. The server gives it at start.
func TestWarnsOfAnEvictingRedis(t *testing.T) {
	for _, tt := range []struct {
		policy string
		warn   bool
	}{{"volatile-lru", true}, {"allkeys-lfu", true}, {"noeviction", false}} {
		t.Run(tt.policy, func(t *testing.T) {
			rs := redistest.Start(t, "--maxmemory-policy", tt.policy)
			rdb := rs.Client(t)
			if got := rdb.ConfigGet(context.Background(), "maxmemory-policy").Val()["maxmemory-policy"]; got != tt.policy {
				t.Fatalf("redis-server runs with maxmemory-policy %q", got)
			}
			var logs lockedBuffer
			warnEviction(context.Background(), rdb, zerolog.New(&logs))
			warned := strings.Contains(logs.String(), "maxmemory-policy noeviction") &&
				strings.Contains(logs.String(), `"maxmemory_policy":"`+tt.policy+`"`)
			if warned != tt.warn {
				t.Errorf("warned %v, want %v:\n%s", warned, tt.warn, logs.String())
			}
			if !tt.warn {
				return
			}
			cfg := testConfig()
			cfg.RedisURL = rs.URL()
			_, serverLogs := startServe(t, cfg)
			waitFor(t, "the warning at start", func() bool { return strings.Contains(serverLogs.String(), "maxmemory-policy noeviction") })
		})
	}
}
