package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/store"
)

// Config is read once from the environment (BATON_*); tests build it directly.
type Config struct {
	Addr       string        `envconfig:"ADDR" default:":8080"`
	RedisURL   string        `envconfig:"REDIS_URL"`
	KeyPrefix  string        `envconfig:"KEY_PREFIX" default:"baton"`
	DefaultTTL time.Duration `envconfig:"DEFAULT_TTL" default:"30s"`
	MinTTL     time.Duration `envconfig:"MIN_TTL" default:"100ms"`
	MaxTTL     time.Duration `envconfig:"MAX_TTL" default:"24h"`
	MaxWait    time.Duration `envconfig:"MAX_WAIT" default:"60s"`
	TicketTTL  time.Duration `envconfig:"TICKET_TTL" default:"10s"`
	MaxWaiters int           `envconfig:"MAX_WAITERS" default:"50000"`
	// KeyMaxWaiters is the max_waiters of a key that sets none; 0: a quarter
	// of MaxWaiters (keyMaxWaiters).
	KeyMaxWaiters int `envconfig:"KEY_MAX_WAITERS"`
	// KeyMaxHolds, KeyMaxTickets and KeyMaxSessions cap the live objects in
	// Redis of a key that sets no max_holds, max_tickets, max_sessions; 0:
	// the defaults (keyCaps). Set, they cap protected and off mode's
	// principal too (builtinCaps).
	KeyMaxHolds    int `envconfig:"KEY_MAX_HOLDS"`
	KeyMaxTickets  int `envconfig:"KEY_MAX_TICKETS"`
	KeyMaxSessions int `envconfig:"KEY_MAX_SESSIONS"`
	// MaxConns bounds the client connections open at once; 0: three quarters
	// of the open-file limit (maxConns).
	MaxConns        int           `envconfig:"MAX_CONNS"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat       string        `envconfig:"LOG_FORMAT" default:"json"`
	ShutdownDelay   time.Duration `envconfig:"SHUTDOWN_DELAY" default:"1s"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"10s"`
	// WaitReplicas > 0: every grant waits (WAIT) for that many replicas to
	// acknowledge it, at most WaitTimeout; see store.Options.
	WaitReplicas int           `envconfig:"WAIT_REPLICAS" default:"0"`
	WaitTimeout  time.Duration `envconfig:"WAIT_TIMEOUT" default:"100ms"`
	// FenceGuard is how long a name's fence key outlives its last grant; fences
	// only grow as long as the Redis clock never steps back by more than this.
	FenceGuard time.Duration `envconfig:"FENCE_GUARD" default:"1h"`
	// IdempotencyGrace is how long an Idempotency-Key is remembered after what
	// its request made has ended.
	IdempotencyGrace time.Duration `envconfig:"IDEMPOTENCY_GRACE" default:"60s"`
	// Secret, when set (at least 32 characters), is the key idempotent ids are
	// derived with; empty: one is made once and kept in Redis (store.Options).
	Secret string `envconfig:"SECRET"`
	// BodyReadTimeout bounds the time a request body may take to arrive.
	BodyReadTimeout time.Duration `envconfig:"BODY_READ_TIMEOUT" default:"10s"`
	// Access control and TLS (access.go; API.md, "Access control").
	AuthFile        string `envconfig:"AUTH_FILE"`
	Auth            string `envconfig:"AUTH"`
	TLSCertFile     string `envconfig:"TLS_CERT_FILE"`
	TLSKeyFile      string `envconfig:"TLS_KEY_FILE"`
	TLSClientCAFile string `envconfig:"TLS_CLIENT_CA_FILE"`
	// DebugAddr, when set, serves Go's runtime profiles there (debug.go): a
	// loopback address, unless DebugAllowRemote.
	DebugAddr        string `envconfig:"DEBUG_ADDR"`
	DebugAllowRemote bool   `envconfig:"DEBUG_ALLOW_REMOTE"`
	// Park is "on" (or empty) to park waiting long-polls' connections (park.go),
	// "off" to keep each on net/http's goroutine while it waits.
	Park string `envconfig:"PARK" default:"on"`
	// MaxQueuedCalls and MaxQueueWait bound the Redis calls waiting for a
	// turn on a connection (store.Options): past either, 503 overloaded.
	MaxQueuedCalls int           `envconfig:"MAX_QUEUED_CALLS" default:"50000"`
	MaxQueueWait   time.Duration `envconfig:"MAX_QUEUE_WAIT" default:"10s"`

	// tracer, when set, traces requests and Redis calls. run sets it from the
	// standard OTEL_* variables (tracing.go), not from a BATON_ one, and tests
	// set it directly; nil: tracing off. envconfig skips unexported fields.
	tracer trace.TracerProvider
}

const (
	// storeWorstCall is the longest one store call can take: two attempts (an
	// acquire whose connection broke is sent once more), each of which may dial
	// (2 s) and wait for its reply (2 s read timeout; see redisconn.NewClient).
	storeWorstCall = store.WorstCall
	// longPollSlack is how much longer than the longest wait the HTTP server
	// gives a response: for the store calls after the wait (two at most: the
	// last check and a cleanup) and the write.
	longPollSlack = 30 * time.Second
)

// maxMaxWait keeps the write timeout (MaxWait + longPollSlack) a valid
// duration; past it, it would wrap around.
var maxMaxWait = (time.Duration(math.MaxInt64) - longPollSlack).Truncate(time.Millisecond)

// keyMaxWaiters is the max_waiters of a key that sets none: BATON_KEY_MAX_WAITERS,
// or a quarter of BATON_MAX_WAITERS, so that one key cannot take every
// long-poll a process allows.
func (c Config) keyMaxWaiters() int {
	if c.KeyMaxWaiters > 0 {
		return c.KeyMaxWaiters
	}
	return max(1, c.MaxWaiters/4)
}

// The caps on live objects of a key that sets none of its own, when the
// environment sets none either: well below what one Redis should hold. Every
// object is about 1 KB in Redis (a hold with its record, a ticket, a session),
// so a key at all three caps keeps about 25 MB there (with its counts): a Redis of a few GB has
// room for a hundred keys doing that at once. 10,000 holds is far more than a
// client needs (a lock per job, per row being edited), and sessions each
// gather many holds, so a tenth of that is plenty.
// maxKeyObjects bounds BATON_KEY_MAX_HOLDS and its siblings, as the keys
// file bounds max_holds.
const maxKeyObjects = 1_000_000_000

const (
	defaultKeyMaxHolds    = 10000
	defaultKeyMaxTickets  = 10000
	defaultKeyMaxSessions = 1000
)

// keyCaps are the caps on live objects of a key that sets none of its own:
// BATON_KEY_MAX_HOLDS, BATON_KEY_MAX_TICKETS, BATON_KEY_MAX_SESSIONS, each
// left at 0 its default.
func (c Config) keyCaps() auth.Caps {
	pick := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return auth.Caps{Holds: pick(c.KeyMaxHolds, defaultKeyMaxHolds), Tickets: pick(c.KeyMaxTickets, defaultKeyMaxTickets),
		Sessions: pick(c.KeyMaxSessions, defaultKeyMaxSessions)}
}

// builtinCaps are the caps of protected and off mode's one principal, which
// all their clients share: only those of BATON_KEY_MAX_HOLDS,
// BATON_KEY_MAX_TICKETS and BATON_KEY_MAX_SESSIONS that are set. A shared
// cap is not a per-tenant quota (one client at it refuses every other), so
// it is opt-in: as a bound on what the one tenant of a host may keep in Redis.
func (c Config) builtinCaps() auth.Caps {
	return auth.Caps{Holds: c.KeyMaxHolds, Tickets: c.KeyMaxTickets, Sessions: c.KeyMaxSessions}
}

// loopbackHost reports whether a listen address's host is localhost or a
// loopback address; "" (every interface) is not.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// defaultMaxConns is BATON_MAX_CONNS where the open-file limit is unknown.
const defaultMaxConns = 10000

// maxConns is BATON_MAX_CONNS, or three quarters of the open-file limit, so
// that a flood of connections leaves descriptors for Redis, the keys file and
// the certificates.
func (c Config) maxConns() int {
	if c.MaxConns > 0 {
		return c.MaxConns
	}
	if n, ok := openFileLimit(); ok {
		return int(max(1, min(n/4*3, 1<<30)))
	}
	return defaultMaxConns
}

// writeTimeout is the HTTP server's WriteTimeout: a long-poll that waited
// MaxWait still has time to be answered.
func (c Config) writeTimeout() time.Duration { return c.MaxWait + longPollSlack }

// validate returns every setting that is out of range, or that breaks a
// promise together with another one, joined.
func (c Config) validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// Durations reach Redis (PEXPIRE) and the API as integer milliseconds: a
	// TTL under 1 ms would be PEXPIRE 0, which deletes the lock as it is granted.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"BATON_MIN_TTL", c.MinTTL}, {"BATON_MAX_TTL", c.MaxTTL}, {"BATON_DEFAULT_TTL", c.DefaultTTL},
		{"BATON_TICKET_TTL", c.TicketTTL}, {"BATON_WAIT_TIMEOUT", c.WaitTimeout}} {
		if d.v < time.Millisecond || d.v%time.Millisecond != 0 {
			add("%s (%v) must be a whole number of milliseconds, at least 1ms", d.name, d.v)
		}
	}
	if c.MinTTL > c.MaxTTL {
		add("BATON_MIN_TTL (%v) must be at most BATON_MAX_TTL (%v)", c.MinTTL, c.MaxTTL)
	}
	if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		add("BATON_DEFAULT_TTL (%v) must be between BATON_MIN_TTL (%v) and BATON_MAX_TTL (%v)", c.DefaultTTL, c.MinTTL, c.MaxTTL)
	}
	if c.TicketTTL < 100*time.Millisecond {
		add("BATON_TICKET_TTL (%v) must be at least 100ms", c.TicketTTL)
	}
	switch {
	case c.MaxWait < 0:
		add("BATON_MAX_WAIT (%v) must not be negative", c.MaxWait)
	case c.MaxWait%time.Millisecond != 0:
		add("BATON_MAX_WAIT (%v) must be a whole number of milliseconds", c.MaxWait)
	case c.MaxWait > maxMaxWait:
		add("BATON_MAX_WAIT (%v) is too long: a long-poll must be answered within it plus %v, and that must be at most %v",
			c.MaxWait, longPollSlack, time.Duration(math.MaxInt64))
	}
	if c.MaxWaiters < 1 {
		add("BATON_MAX_WAITERS must be at least 1")
	}
	if c.MaxQueuedCalls < 1 {
		add("BATON_MAX_QUEUED_CALLS must be at least 1")
	}
	if c.MaxQueueWait < time.Millisecond {
		add("BATON_MAX_QUEUE_WAIT (%v) must be at least 1ms", c.MaxQueueWait)
	}
	if c.MaxConns < 0 {
		add("BATON_MAX_CONNS must not be negative (0: three quarters of the open-file limit)")
	}
	if c.KeyMaxWaiters < 0 || c.KeyMaxWaiters > c.MaxWaiters {
		add("BATON_KEY_MAX_WAITERS (%d) must be between 1 and BATON_MAX_WAITERS (%d), or 0 for a quarter of it", c.KeyMaxWaiters, c.MaxWaiters)
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"BATON_KEY_MAX_HOLDS", c.KeyMaxHolds}, {"BATON_KEY_MAX_TICKETS", c.KeyMaxTickets}, {"BATON_KEY_MAX_SESSIONS", c.KeyMaxSessions}} {
		if v.n < 0 || v.n > maxKeyObjects {
			add("%s (%d) must be between 1 and %d, or 0 for its default", v.name, v.n, maxKeyObjects)
		}
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		add("BATON_LOG_FORMAT must be json or console")
	}
	if c.ShutdownDelay < 0 {
		add("BATON_SHUTDOWN_DELAY (%v) must not be negative", c.ShutdownDelay)
	}
	if c.ShutdownTimeout < storeWorstCall {
		add("BATON_SHUTDOWN_TIMEOUT (%v) must be at least %v: a request in flight may be inside a store call "+
			"that takes that long (two attempts of a 2s dial and a 2s read), and one cut off may leave a lock "+
			"held that its client never heard of", c.ShutdownTimeout, storeWorstCall)
	}
	if c.WaitReplicas < 0 {
		add("BATON_WAIT_REPLICAS must not be negative (0 turns WAIT off)")
	}
	if c.WaitReplicas > 0 && c.RedisURL == "" {
		add("BATON_WAIT_REPLICAS needs BATON_REDIS_URL: the embedded store has no replicas")
	}
	if c.IdempotencyGrace < time.Second || c.IdempotencyGrace%time.Millisecond != 0 {
		add("BATON_IDEMPOTENCY_GRACE (%v) must be a whole number of milliseconds, at least 1s", c.IdempotencyGrace)
	}
	if c.Secret != "" && len(c.Secret) < 32 {
		add("BATON_SECRET must be at least 32 characters (or empty: Baton keeps one in Redis)")
	}
	if c.BodyReadTimeout < time.Millisecond {
		add("BATON_BODY_READ_TIMEOUT (%v) must be at least 1ms", c.BodyReadTimeout)
	}
	if c.FenceGuard < time.Second {
		add("BATON_FENCE_GUARD (%v) must be at least 1s: it is the longest backward step of the Redis clock fences survive", c.FenceGuard)
	}
	if c.DebugAddr != "" && !c.DebugAllowRemote {
		if host, _, err := net.SplitHostPort(c.DebugAddr); err == nil && !loopbackHost(host) {
			add("BATON_DEBUG_ADDR (%s) is not a loopback address: the runtime profiles need no key and show every goroutine's "+
				"stack and the heap. Use 127.0.0.1:PORT (or [::1]:PORT, localhost:PORT), or set BATON_DEBUG_ALLOW_REMOTE=true "+
				"to serve them there, on a private network only", c.DebugAddr)
		}
	}
	if c.Park != "" && c.Park != "on" && c.Park != "off" {
		add("BATON_PARK must be on or off")
	}
	// WAIT must end well within the Redis client's 2s read timeout.
	if c.WaitTimeout > time.Second {
		add("BATON_WAIT_TIMEOUT (%v) must be between 1ms and 1s", c.WaitTimeout)
	}
	return errors.Join(errs...)
}
