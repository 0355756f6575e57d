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
//
// Connecting to Redis (URLs, Sentinel, the cluster's slot map, the health
// gate, tracing) is package store/redisconn's. Here, by concern:
//
//   - the Store, its options and its life (store.go); the sentinel errors and
//     the results (errors.go, types.go);
//   - the lock operations: acquire, renew, release, force, state, cancel
//     (ops.go), the waits and ticket polls (wait.go, ticketwait.go, watch.go,
//     events.go), sessions (sessions.go),
//     listing (list.go), the ids a request is made under (ids.go,
//     requestids.go, secret.go);
//   - the script calls: the scripts (scripts.go), one call with its "not
//     after" and its retries (calls.go, clock.go), the replies (reply.go),
//     the turns on the connections (admission.go), WAIT for replicas
//     (replicas.go), what a cluster needs more (cluster.go);
//   - the undo of unknown outcomes (undo.go);
//   - the pub/sub dispatcher that wakes waiters (dispatcher*.go) and the
//     profiler labels of the store's goroutines (labels.go).
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/lua"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store/redisconn"
)

// Options configure a Store.
type Options struct {
	Prefix     string        // prefix of every key and channel; default "baton"
	TicketTTL  time.Duration // how long a ticket lives without a poll; default 10s
	MaxWaiters int           // long-polls this process holds at once; default 50000
	Logger     zerolog.Logger
	Metrics    *metrics.Metrics // default: a fresh set

	// WaitReplicas, when above 0, makes every script that can tell a client it
	// holds a lock (grant, re-entry, ticket poll, renewal, release and force, which
	// hand the lock on) wait, before its reply is used, until that many replicas
	// have acknowledged everything the master had done (WAIT). When fewer do within
	// WaitTimeout the reply stands, and baton_wait_unacked_total counts it.
	WaitReplicas int
	WaitTimeout  time.Duration // default 100ms

	// FenceGuard is how long a lock's fence key outlives its last grant (and its
	// holds and queue), default 1h: fences only grow as long as the Redis clock
	// never steps back by more than this (lua/lib.lua, next_fence, says why).
	// Under a second is taken as a second.
	FenceGuard time.Duration

	// IdempotencyGrace is how long an Idempotency-Key is remembered after what
	// its request made has ended; default 60s.
	IdempotencyGrace time.Duration
	// Secret is the key ids of idempotent requests are derived with (HMAC), the
	// same on every replica; empty: one is made once and kept in Redis.
	Secret []byte

	// MaxQueuedCalls bounds the script calls waiting for a turn on a Redis
	// connection (admission.go), default DefaultMaxQueuedCalls; MaxQueueWait
	// bounds how long one waits, default DefaultMaxQueueWait. A call past
	// either answers ErrOverloaded.
	MaxQueuedCalls int
	MaxQueueWait   time.Duration

	// Gate, from redisconn.NewGatedClient, keeps calls away from a Redis that is down
	// (they answer ErrUnavailable at once) and lets them through the moment it
	// answers again; nil: none. Close closes it.
	Gate *redisconn.Gate
}

// Store is the Redis lock store. It is safe for concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil unless rdb is one
	topo    *redisconn.Topology  // the cluster's slot map; nil unless rdb is a cluster client
	clocks  sync.Map             // on a cluster: master address -> *redisClock
	opt     Options
	m       *metrics.Metrics
	disp    *dispatcher
	waiters atomic.Int64

	ss  *scriptSet // the scripts (scripts.go)
	adm *admission // the calls' turns on the connections (admission.go)

	secretKey atomic.Pointer[[]byte] // see secret.go
	secretErr atomic.Pointer[error]  // ErrSecretMismatch, once found
	clock     redisClock             // see clock.go

	undos *undoer // the undos under way (undo.go)

	// inFlight lets Close wait for the calls in flight: each call holds it
	// shared. (Not the health gate, opt.Gate.)
	inFlight sync.RWMutex
	closed   bool // guarded by inFlight

	shutdown     chan struct{}
	stopped      context.Context // ends with shutdown: waits hear of it through context.AfterFunc
	stop         context.CancelFunc
	shutdownOnce sync.Once
	closeOnce    sync.Once
	unackedLog   atomic.Int64 // unix ms of the last unacknowledged-WAIT warning
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
	if opt.WaitReplicas < 0 {
		opt.WaitReplicas = 0
	}
	if opt.WaitTimeout <= 0 {
		opt.WaitTimeout = 100 * time.Millisecond
	}
	if opt.FenceGuard == 0 {
		opt.FenceGuard = time.Hour
	}
	opt.FenceGuard = max(opt.FenceGuard, time.Second)
	if opt.IdempotencyGrace <= 0 {
		opt.IdempotencyGrace = time.Minute
	}
	if opt.MaxQueuedCalls <= 0 {
		opt.MaxQueuedCalls = DefaultMaxQueuedCalls
	}
	if opt.MaxQueueWait <= 0 {
		opt.MaxQueueWait = DefaultMaxQueueWait
	}
	cc, _ := rdb.(*redis.ClusterClient)
	s := &Store{
		rdb:     rdb,
		cluster: cc,
		opt:     opt,
		m:       opt.Metrics,
		ss: newScriptSet(lua.Settings{FenceGuardMs: opt.FenceGuard.Milliseconds(),
			IdempotencyGraceMs: opt.IdempotencyGrace.Milliseconds(), Sharded: cc != nil}),
		undos:    newUndoer(),
		shutdown: make(chan struct{}),
	}
	s.adm = newAdmission(rdb, opt.MaxQueuedCalls, opt.MaxQueueWait, opt.Metrics, s.shutdown)
	s.stopped, s.stop = context.WithCancel(context.Background())
	if cc != nil {
		s.topo = redisconn.NewTopology(cc)
	}
	s.disp = newDispatcher(rdb, s.topo, s.pokeLock, opt.Logger, s.m)
	goLabelled(labelClock, s.runClock)
	opt.Gate.OnOpen(func() { // Redis is back, perhaps empty: give it the secret back
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if s.secretKey.Load() != nil {
			_ = s.syncSecret(ctx)
		}
	})
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
	if s.opt.Gate.Down() {
		return fmt.Errorf("ready: %w: redis is down (health gate)", ErrUnavailable)
	}
	if s.topo != nil && !s.topo.Loaded() {
		return fmt.Errorf("ready: %w: the cluster's slot map is not loaded yet", ErrUnavailable)
	}
	if !s.clockKnown() {
		s.syncClock(ctx)
	}
	if err := s.syncSecret(ctx); err != nil {
		return err
	}
	if err := s.loadScripts(ctx); err != nil {
		return s.storeErr("ready", err)
	}
	return nil
}

// Shutdown ends every long-poll now with its normal "still waiting" answer, and
// makes new ones return at once. Short requests keep working until Close.
func (s *Store) Shutdown() {
	s.shutdownOnce.Do(func() { close(s.shutdown); s.stop() })
}

// Close shuts down, waits for the Redis calls in flight to end (each is bounded
// by the client's timeouts), gives the requests abandoned meanwhile up to
// closeUndoWait (all told) to end and be undone, and stops the pub/sub
// dispatcher. Calls after Close answer ErrUnavailable. It does not close the
// client.
func (s *Store) Close() error {
	s.Shutdown()
	s.closeOnce.Do(func() {
		s.inFlight.Lock()
		s.closed = true
		s.inFlight.Unlock()
		// A request whose call just failed queues its undo after the call gave
		// inFlight back: wait for those requests, then for the undos.
		s.awaitUndos(time.Now().Add(closeUndoWait))
		s.opt.Gate.Close()
	})
	err := s.disp.close()
	if s.topo != nil {
		s.topo.Close()
	}
	return err
}

// WorstCall is the longest one store call can take while Redis does not answer:
// two attempts, each bounded by the client's 2 s write and read timeouts. A
// shutdown should allow for it and closeUndoWait.
const WorstCall = 2 * (2*time.Second + 2*time.Second)

func (s *Store) shuttingDown() bool {
	select {
	case <-s.shutdown:
		return true
	default:
		return false
	}
}

// lockKey is the lock's key, KEYS[1] of its scripts: every other key of the
// lock is derived from it and shares its hash slot ({name}).
func (s *Store) lockKey(name string) string {
	return s.opt.Prefix + ":{" + name + "}"
}

func (s *Store) channel(name string) string {
	return s.opt.Prefix + ":{" + name + "}:ev"
}

// storeErr counts a failed Redis call and classifies it: no connection free
// in the pool in time is ErrOverloaded (a queue in this process, not Redis
// down); unreachable, timed out, failing over or loading is ErrUnavailable;
// anything else (a script error) is returned wrapped, for the caller to
// report as internal.
func (s *Store) storeErr(op string, err error) error {
	s.m.RedisErrors.Inc()
	if errors.Is(err, redis.ErrPoolTimeout) {
		s.m.Overloaded.WithLabelValues("pool_timeout").Inc()
		return fmt.Errorf("%s: %w: %w", op, ErrOverloaded, err)
	}
	if redisconn.IsConnError(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY ", "MOVED ", "ASK "} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
			}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
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
