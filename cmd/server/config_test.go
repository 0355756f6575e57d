package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/batonhq/baton/auth"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want string // a part of the error; empty: valid
	}{
		{name: "defaults", give: func(c *Config) {}},
		{name: "sentinel with WAIT", give: func(c *Config) { c.RedisURL, c.WaitReplicas = "redis+sentinel://h/m", 1 }},
		{name: "negative wait replicas", give: func(c *Config) { c.WaitReplicas = -1 }, want: "BATON_WAIT_REPLICAS must not be negative"},
		{name: "WAIT on the embedded store", give: func(c *Config) { c.WaitReplicas = 1 }, want: "BATON_WAIT_REPLICAS needs BATON_REDIS_URL"},
		{name: "zero wait timeout", give: func(c *Config) { c.WaitTimeout = 0 }, want: "BATON_WAIT_TIMEOUT"},
		{name: "wait timeout past the read timeout", give: func(c *Config) { c.WaitTimeout = 2 * time.Second }, want: "BATON_WAIT_TIMEOUT"},

		// A TTL under 1 ms, or between two, reaches PEXPIRE as 0 or truncated:
		// PEXPIRE 0 deletes the lock at once while its client is told 201.
		{name: "min ttl under 1ms", give: func(c *Config) { c.MinTTL = 500 * time.Microsecond }, want: "BATON_MIN_TTL (500µs) must be a whole number of milliseconds, at least 1ms"},
		{name: "min ttl 1ms", give: func(c *Config) { c.MinTTL, c.DefaultTTL = time.Millisecond, time.Millisecond }},
		{name: "min ttl not whole ms", give: func(c *Config) { c.MinTTL = 1500 * time.Microsecond }, want: "BATON_MIN_TTL (1.5ms) must be a whole number of milliseconds"},
		{name: "default ttl under 1ms", give: func(c *Config) { c.MinTTL, c.DefaultTTL = time.Millisecond, 999*time.Microsecond }, want: "BATON_DEFAULT_TTL (999µs) must be a whole number of milliseconds"},
		{name: "default ttl not whole ms", give: func(c *Config) { c.DefaultTTL = 30*time.Second + time.Nanosecond }, want: "BATON_DEFAULT_TTL"},
		{name: "max ttl not whole ms", give: func(c *Config) { c.MaxTTL = 24*time.Hour + time.Microsecond }, want: "BATON_MAX_TTL"},
		{name: "max ttl zero", give: func(c *Config) { c.MaxTTL = 0 }, want: "BATON_MAX_TTL (0s) must be a whole number of milliseconds, at least 1ms"},
		{name: "min above max", give: func(c *Config) { c.MinTTL, c.MaxTTL = time.Minute, time.Second }, want: "BATON_MIN_TTL (1m0s) must be at most BATON_MAX_TTL (1s)"},
		{name: "default below min", give: func(c *Config) { c.DefaultTTL = 50 * time.Millisecond }, want: "BATON_DEFAULT_TTL (50ms) must be between BATON_MIN_TTL (100ms) and BATON_MAX_TTL (24h0m0s)"},
		{name: "default above max", give: func(c *Config) { c.DefaultTTL = 25 * time.Hour }, want: "BATON_DEFAULT_TTL (25h0m0s) must be between"},
		{name: "ticket ttl not whole ms", give: func(c *Config) { c.TicketTTL = 10*time.Second + time.Microsecond }, want: "BATON_TICKET_TTL"},
		{name: "ticket ttl too short", give: func(c *Config) { c.TicketTTL = 99 * time.Millisecond }, want: "BATON_TICKET_TTL (99ms) must be at least 100ms"},
		{name: "wait timeout not whole ms", give: func(c *Config) { c.WaitTimeout = 1500 * time.Microsecond }, want: "BATON_WAIT_TIMEOUT (1.5ms) must be a whole number of milliseconds"},
		{name: "wait timeout under 1ms", give: func(c *Config) { c.WaitTimeout = time.Microsecond }, want: "BATON_WAIT_TIMEOUT"},
		// The HTTP write timeout is derived from the longest wait: any wait that
		// is accepted must leave it room to answer.
		{name: "no waiting", give: func(c *Config) { c.MaxWait = 0 }},
		{name: "negative max wait", give: func(c *Config) { c.MaxWait = -time.Second }, want: "BATON_MAX_WAIT (-1s) must not be negative"},
		{name: "max wait not whole ms", give: func(c *Config) { c.MaxWait = time.Minute + time.Microsecond }, want: "BATON_MAX_WAIT (1m0.000001s) must be a whole number of milliseconds"},
		{name: "a long max wait", give: func(c *Config) { c.MaxWait = 24 * time.Hour }},
		{name: "max wait past the write timeout's range", give: func(c *Config) { c.MaxWait = 2562047*time.Hour + 47*time.Minute }, want: "BATON_MAX_WAIT (2562047h47m0s) is too long"},

		// A request in flight at shutdown may be inside a store call.
		{name: "shutdown timeout under the worst store call", give: func(c *Config) { c.ShutdownTimeout = 5 * time.Second }, want: "BATON_SHUTDOWN_TIMEOUT (5s) must be at least 8s"},
		{name: "shutdown timeout of the worst store call", give: func(c *Config) { c.ShutdownTimeout = 8 * time.Second }},
		{name: "zero shutdown timeout", give: func(c *Config) { c.ShutdownTimeout = 0 }, want: "BATON_SHUTDOWN_TIMEOUT (0s) must be at least 8s"},
		{name: "fence guard under 1s", give: func(c *Config) { c.FenceGuard = 999 * time.Millisecond }, want: "BATON_FENCE_GUARD (999ms) must be at least 1s"},
		{name: "fence guard 1s", give: func(c *Config) { c.FenceGuard = time.Second }},
		{name: "a key's waiters above the process's", give: func(c *Config) { c.MaxWaiters, c.KeyMaxWaiters = 20, 21 }, want: "BATON_KEY_MAX_WAITERS (21) must be between 1 and BATON_MAX_WAITERS (20)"},
		{name: "negative key waiters", give: func(c *Config) { c.KeyMaxWaiters = -1 }, want: "BATON_KEY_MAX_WAITERS"},
		{name: "a key may have all waiters", give: func(c *Config) { c.MaxWaiters, c.KeyMaxWaiters = 20, 20 }},
		{name: "debug on loopback", give: func(c *Config) { c.DebugAddr = "127.0.0.1:6060" }},
		{name: "debug on IPv6 loopback", give: func(c *Config) { c.DebugAddr = "[::1]:6060" }},
		{name: "debug on localhost", give: func(c *Config) { c.DebugAddr = "localhost:6060" }},
		{name: "debug on every interface", give: func(c *Config) { c.DebugAddr = ":6060" }, want: "BATON_DEBUG_ADDR (:6060) is not a loopback address"},
		{name: "debug on 0.0.0.0", give: func(c *Config) { c.DebugAddr = "0.0.0.0:6060" }, want: "BATON_DEBUG_ALLOW_REMOTE=true"},
		{name: "debug on a LAN address", give: func(c *Config) { c.DebugAddr = "10.1.2.3:6060" }, want: "not a loopback address"},
		{name: "debug on a host name", give: func(c *Config) { c.DebugAddr = "baton-1.internal:6060" }, want: "not a loopback address"},
		{name: "debug anywhere, allowed", give: func(c *Config) { c.DebugAddr, c.DebugAllowRemote = ":6060", true }},
		{name: "negative max conns", give: func(c *Config) { c.MaxConns = -1 }, want: "BATON_MAX_CONNS must not be negative"},
		{name: "negative key holds", give: func(c *Config) { c.KeyMaxHolds = -1 }, want: "BATON_KEY_MAX_HOLDS (-1) must be between 1 and 1000000000, or 0 for its default"},
		{name: "too many key tickets", give: func(c *Config) { c.KeyMaxTickets = 1_000_000_001 }, want: "BATON_KEY_MAX_TICKETS"},
		{name: "negative key sessions", give: func(c *Config) { c.KeyMaxSessions = -5 }, want: "BATON_KEY_MAX_SESSIONS"},
		{name: "key caps set", give: func(c *Config) { c.KeyMaxHolds, c.KeyMaxTickets, c.KeyMaxSessions = 1, 2, 3 }},
		{name: "negative shutdown delay", give: func(c *Config) { c.ShutdownDelay = -time.Second }, want: "BATON_SHUTDOWN_DELAY (-1s) must not be negative"},
		{name: "no queued calls", give: func(c *Config) { c.MaxQueuedCalls = 0 }, want: "BATON_MAX_QUEUED_CALLS must be at least 1"},
		{name: "no queue wait", give: func(c *Config) { c.MaxQueueWait = 0 }, want: "BATON_MAX_QUEUE_WAIT (0s) must be at least 1ms"},
		{name: "a short queue wait", give: func(c *Config) { c.MaxQueueWait = time.Millisecond }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.give(&cfg)
			err := cfg.validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// A key without max_waiters may hold a quarter of the process's long-polls,
// unless BATON_KEY_MAX_WAITERS says otherwise; never none.
func TestKeyMaxWaitersDefault(t *testing.T) {
	for _, tt := range []struct{ max, key, want int }{{50000, 0, 12500}, {20, 0, 5}, {3, 0, 1}, {1, 0, 1}, {20, 7, 7}} {
		cfg := testConfig()
		cfg.MaxWaiters, cfg.KeyMaxWaiters = tt.max, tt.key
		if got := cfg.keyMaxWaiters(); got != tt.want {
			t.Errorf("BATON_MAX_WAITERS=%d BATON_KEY_MAX_WAITERS=%d: %d, want %d", tt.max, tt.key, got, tt.want)
		}
	}
}

// A key without caps of its own gets BATON_KEY_MAX_HOLDS, _TICKETS and
// _SESSIONS, each left unset its default; the built-in principals get only
// those that are set.
func TestKeyCapsDefault(t *testing.T) {
	cfg := testConfig()
	if got, want := cfg.keyCaps(), (auth.Caps{Holds: 10000, Tickets: 10000, Sessions: 1000}); got != want {
		t.Errorf("unset: keys get %+v, want %+v", got, want)
	}
	if got := cfg.builtinCaps(); got != (auth.Caps{}) {
		t.Errorf("unset: the built-in principals get %+v, want none", got)
	}
	cfg.KeyMaxHolds, cfg.KeyMaxSessions = 5, 6
	if got, want := cfg.keyCaps(), (auth.Caps{Holds: 5, Tickets: 10000, Sessions: 6}); got != want {
		t.Errorf("holds and sessions set: keys get %+v, want %+v", got, want)
	}
	if got, want := cfg.builtinCaps(), (auth.Caps{Holds: 5, Sessions: 6}); got != want {
		t.Errorf("holds and sessions set: the built-in principals get %+v, want %+v", got, want)
	}
}

// Without BATON_MAX_CONNS, the connection limit stays well below the
// open-file limit, so that a flood of connections leaves descriptors for Redis.
func TestMaxConnsDefault(t *testing.T) {
	cfg := testConfig()
	n, ok := openFileLimit()
	if !ok {
		t.Skip("no open-file limit on this platform")
	}
	if got := cfg.maxConns(); got < 1 || uint64(got) > n*3/4 {
		t.Errorf("default BATON_MAX_CONNS %d with an open-file limit of %d, want at most three quarters of it", got, n)
	}
	cfg.MaxConns = 7
	if got := cfg.maxConns(); got != 7 {
		t.Errorf("BATON_MAX_CONNS=7: %d", got)
	}
}

// Every accepted longest wait leaves the HTTP server time to answer a long-poll
// that waited that long: the store calls after the wait, then the write.
func TestWriteTimeoutCoversLongestWait(t *testing.T) {
	for _, give := range []time.Duration{0, time.Second, 60 * time.Second, 24 * time.Hour, maxMaxWait} {
		cfg := testConfig()
		cfg.MaxWait = give
		if err := cfg.validate(); err != nil {
			t.Fatalf("MaxWait %v: %v", give, err)
		}
		if got := cfg.writeTimeout(); got < give+2*storeWorstCall {
			t.Errorf("MaxWait %v: got WriteTimeout %v, want at least %v", give, got, give+2*storeWorstCall)
		}
	}
}

// The environment's defaults pass, and a setting that does not stops the server
// before it starts.
func TestRunChecksConfig(t *testing.T) {
	var cfg Config
	if err := envconfig.Process("baton", &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	t.Setenv("BATON_MIN_TTL", "500us")
	t.Setenv("BATON_ADDR", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // were it to serve
	defer cancel()
	err := run(ctx, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "BATON_MIN_TTL (500µs) must be a whole number of milliseconds") {
		t.Errorf("BATON_MIN_TTL=500us: got %v, want it refused", err)
	}
}
