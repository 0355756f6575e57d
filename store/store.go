// Package store keeps Baton's locks in Redis: the scripts that change them, the key
// layout, the registry of local waiters and the one pub/sub connection that wakes
// them. It returns typed results and the sentinel errors of errors.go; it knows
// nothing of HTTP.
//
// Every lock operation is one script call. Waiting is driven by release and grant
// notifications on the lock's channel, never by polling; a timer set to the
// holder's remaining lease pokes the lock when the lease should have run out
// (expiry runs no script), and every waiter re-checks when the pub/sub connection
// comes back, because pub/sub drops messages while it is down.
package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/lua"
	"github.com/batonhq/baton/metrics"
)

// Options configure a Store.
type Options struct {
	Prefix     string        // prefix of every key and channel; default "baton"
	TicketTTL  time.Duration // how long a ticket lives without a poll; default 10s
	MaxWaiters int           // long-polls this process holds at once; default 50000
	Logger     zerolog.Logger
	Metrics    *metrics.Metrics // default: a fresh set
}

// Store is the Redis lock store. It is safe for concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	opt     Options
	m       *metrics.Metrics
	disp    *dispatcher
	waiters atomic.Int64

	acquire, renew, release, force, state, poll, cancel, poke *redis.Script

	shutdown     chan struct{}
	shutdownOnce sync.Once
}

// NewClient returns a go-redis client for a redis:// or rediss:// URL, set up as the
// store needs it: no automatic retries, because go-redis would retry a script whose
// connection broke after it was sent, and re-entry or release must never run twice.
// The store retries idempotent scripts itself.
func NewClient(url string) (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	opt.MaxRetries = -1
	// One dial attempt: while Redis is down, answer 503 at once rather than after
	// go-redis's five attempts; the client retries after Retry-After.
	opt.DialerRetries = 1
	opt.DialTimeout = 2 * time.Second
	opt.ReadTimeout = 2 * time.Second
	opt.WriteTimeout = 2 * time.Second
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

// New returns a Store on rdb and starts its pub/sub dispatcher. Close stops it.
func New(rdb redis.UniversalClient, opt Options) *Store {
	if opt.Prefix == "" {
		opt.Prefix = "baton"
	}
	if opt.TicketTTL <= 0 {
		opt.TicketTTL = 10 * time.Second
	}
	if opt.MaxWaiters <= 0 {
		opt.MaxWaiters = 50000
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New()
	}
	s := &Store{
		rdb:      rdb,
		opt:      opt,
		m:        opt.Metrics,
		acquire:  redis.NewScript(lua.Acquire),
		renew:    redis.NewScript(lua.Renew),
		release:  redis.NewScript(lua.Release),
		force:    redis.NewScript(lua.Force),
		state:    redis.NewScript(lua.State),
		poll:     redis.NewScript(lua.Poll),
		cancel:   redis.NewScript(lua.Cancel),
		poke:     redis.NewScript(lua.Poke),
		shutdown: make(chan struct{}),
	}
	s.disp = newDispatcher(rdb, s.pokeLock, opt.Logger, s.m)
	return s
}

// TicketTTL is how long a ticket lives without a poll.
func (s *Store) TicketTTL() time.Duration { return s.opt.TicketTTL }

// Ready reports whether Redis answers and every script is loaded (loading any that
// are missing, as after a Redis restart). It returns ErrUnavailable otherwise, and
// while shutting down.
func (s *Store) Ready(ctx context.Context) error {
	select {
	case <-s.shutdown:
		return fmt.Errorf("shutting down: %w", ErrUnavailable)
	default:
	}
	all := s.scripts()
	hashes := make([]string, len(all))
	for i, sc := range all {
		hashes[i] = sc.Hash()
	}
	loaded, err := s.rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		return s.storeErr("ready", err)
	}
	for i, ok := range loaded {
		if !ok {
			if err := all[i].Load(ctx, s.rdb).Err(); err != nil {
				return s.storeErr("ready", err)
			}
		}
	}
	return nil
}

func (s *Store) scripts() []*redis.Script {
	return []*redis.Script{s.acquire, s.renew, s.release, s.force, s.state, s.poll, s.cancel, s.poke}
}

// Shutdown ends every long-poll now with its normal "still waiting" answer, and
// makes new ones return at once. Short requests keep working until Close.
func (s *Store) Shutdown() {
	s.shutdownOnce.Do(func() { close(s.shutdown) })
}

// Close shuts down and stops the pub/sub dispatcher. It does not close the client.
func (s *Store) Close() error {
	s.Shutdown()
	return s.disp.close()
}

func (s *Store) shuttingDown() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// keys are the three keys every script takes (lib.lua), all in the hash slot of {name}.
func (s *Store) keys(name string) []string {
	lock := s.opt.Prefix + ":{" + name + "}"
	return []string{lock, lock + ":fence", lock + ":q"}
}

func (s *Store) ticketKey(name, th string) string {
	return s.opt.Prefix + ":{" + name + "}:t:" + th
}

func (s *Store) channel(name string) string {
	return s.opt.Prefix + ":{" + name + "}:ev"
}

// run calls a script and decodes its reply. Only idempotent scripts pass retry:
// they are sent again once when the connection broke.
func (s *Store) run(ctx context.Context, sc *redis.Script, op string, keys []string, retry bool, args ...any) (reply, error) {
	for attempt := 0; ; attempt++ {
		v, err := sc.Run(ctx, s.rdb, keys, args...).Slice()
		if err == nil {
			return decodeReply(v)
		}
		if retry && attempt == 0 && ctx.Err() == nil && isConnError(err) {
			continue
		}
		return reply{}, s.storeErr(op, err)
	}
}

// storeErr counts a failed Redis call and classifies it: unreachable, timed out,
// failing over or loading is ErrUnavailable; anything else (a script error) is
// returned wrapped, for the caller to report as internal.
func (s *Store) storeErr(op string, err error) error {
	s.m.RedisErrors.Inc()
	if isConnError(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY "} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
			}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isConnError reports a broken, refused or timed-out connection, or a closed pool.
func isConnError(err error) bool {
	if errors.Is(err, redis.ErrClosed) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var nerr net.Error
	if errors.As(err, &nerr) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "EOF") || strings.Contains(msg, "connection") || strings.Contains(msg, "pool timeout")
}

func (s *Store) reserveWaiter() error {
	if s.waiters.Add(1) > int64(s.opt.MaxWaiters) {
		s.waiters.Add(-1)
		return ErrTooManyWaiters
	}
	s.m.Waiters.Inc()
	return nil
}

func (s *Store) releaseWaiter() {
	s.waiters.Add(-1)
	s.m.Waiters.Dec()
}

func ms(d time.Duration) int64 { return d.Milliseconds() }
