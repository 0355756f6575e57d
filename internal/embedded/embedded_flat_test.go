package embedded

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The embedded store's cost does not grow with the keys it holds: with 100k
// keys that have a TTL, an idle process burns no CPU, and a short lease is
// seen expired at its deadline.
func TestEmbeddedFlatInKeys(t *testing.T) {
	ctx := context.Background()
	rdb := startTestEmbedded(t, func(o *redis.Options) { o.ReadTimeout = time.Minute }) // the fill's scripts are long

	// One script per 10k keys: a command per key would mostly wait for the store.
	const keys = 100_000
	fill := redis.NewScript(`for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', string.format('baton:{order:%08d}:fence', i), i, 'PX', 3600000)
end`)
	for from := 0; from < keys; from += 10_000 {
		if err := fill.Run(ctx, rdb, nil, from, from+9_999).Err(); err != nil && err != redis.Nil {
			t.Fatalf("fill: %v", err)
		}
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != keys {
		t.Fatalf("DBSIZE after the fill: got %v %v, want %d", n, err, keys)
	}

	t.Run("idle", func(t *testing.T) {
		const interval = time.Second
		cpu0, wall0 := cpuTime(t), time.Now()
		time.Sleep(interval) // measuring an interval: there is no event to await
		used, wall := cpuTime(t)-cpu0, time.Since(wall0)
		t.Logf("idle with %d keys: %v CPU in %v", keys, used, wall)
		if used > wall/5 {
			t.Errorf("idle process used %v CPU in %v, want under 20%% of a core", used, wall)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		const ttl = 200 * time.Millisecond
		for trial := range 3 {
			key := fmt.Sprintf("lease-%d", trial)
			if err := rdb.Set(ctx, key, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			if err := rdb.PExpire(ctx, key, ttl).Err(); err != nil {
				t.Fatal(err)
			}
			// Deadlines are kept in whole milliseconds, as on Redis.
			deadline := sent.Truncate(time.Millisecond).Add(ttl)
			if left, err := rdb.PTTL(ctx, key).Result(); err != nil || left <= 0 || left > ttl {
				t.Fatalf("PTTL after PEXPIRE %v: got %v %v", ttl, left, err)
			}
			var gone time.Time
			for {
				n, err := rdb.Exists(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					gone = time.Now()
					break
				}
				if time.Since(deadline) > 5*time.Second {
					t.Fatalf("key still there 5s after its deadline")
				}
				time.Sleep(time.Millisecond) // polling the store: expiry sends no event
			}
			if gone.Before(deadline) {
				t.Errorf("trial %d: expired %v before its deadline", trial, deadline.Sub(gone))
			}
			// Redis's 50 ms is a figure for a benchmark: a loaded machine
			// delays this loop by more. What this checks is that the key goes
			// at its deadline, not when some sweep gets to it.
			late := gone.Sub(deadline)
			t.Logf("trial %d: seen expired %v after its deadline", trial, late)
			if late > time.Second {
				t.Errorf("trial %d: seen expired %v after its deadline, want at once", trial, late)
			}
			if left, err := rdb.PTTL(ctx, key).Result(); err != nil || left != -2 {
				t.Errorf("trial %d: PTTL after expiry: got %v %v, want -2", trial, left, err)
			}
		}
	})
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
