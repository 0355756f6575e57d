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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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

	// Gate, from NewGatedClient, keeps calls away from a Redis that is down
	// (they answer ErrUnavailable at once) and lets them through the moment it
	// answers again; nil: none. Close closes it.
	Gate *Gate
}

// Store is the Redis lock store. It is safe for concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil unless rdb is one
	topo    *topology            // the cluster's slot map (cluster.go); nil unless rdb is a cluster client
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

	// gate lets Close wait for the calls in flight: each call holds it shared.
	gate   sync.RWMutex
	closed bool // guarded by gate

	shutdown     chan struct{}
	stopped      context.Context // ends with shutdown: waits hear of it through context.AfterFunc
	stop         context.CancelFunc
	shutdownOnce sync.Once
	closeOnce    sync.Once
	unackedLog   atomic.Int64 // unix ms of the last unacknowledged-WAIT warning
}

// NewClient returns a go-redis client for a redis://, rediss://,
// redis+sentinel://, redis+cluster:// or rediss+cluster:// URL, set up as the
// store needs it: no automatic retries,
// because go-redis would retry a script whose connection broke after it was sent,
// and re-entry or release must never run twice. The store retries idempotent
// scripts itself.
//
// A Sentinel URL names the sentinels and the master group:
//
//	redis+sentinel://[[user]:password@]host1[:port1][,host2[:port2]...]/mastername[/db][?sentinel_username=u&sentinel_password=p]
//
// The user and password are the Redis servers' (master and replicas); the
// sentinels' own credentials, when they have any, go in the query. A port left
// out is 26379. The client asks the sentinels for the master and follows it
// through failovers.
//
// A Redis Cluster URL lists seed nodes (parseClusterURL):
//
//	redis+cluster://[[user]:password@]host1:port1[,host2:port2...]
func NewClient(rawURL string) (redis.UniversalClient, error) {
	return newClient(rawURL, nil)
}

// NewGatedClient is NewClient with a Gate (gate.go) on its dials; pass the gate
// to the Store (Options.Gate), which closes it when Redis stops answering. A
// cluster gets no gate (nil): one node down is not the cluster down, and the
// cluster client marks and avoids failing nodes itself.
func NewGatedClient(rawURL string) (redis.UniversalClient, *Gate, error) {
	if isClusterURL(rawURL) {
		rdb, err := newClusterClient(rawURL)
		return rdb, nil, err
	}
	g := NewGate(rawURL)
	rdb, err := newClient(rawURL, g)
	return rdb, g, err
}

func newClient(rawURL string, g *Gate) (redis.UniversalClient, error) {
	if isClusterURL(rawURL) {
		return newClusterClient(rawURL)
	}
	if strings.HasPrefix(rawURL, sentinelScheme+"://") {
		fo, err := parseSentinelURL(rawURL)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		connLimits(&fo.MaxRetries, &fo.DialerRetries, &fo.DialTimeout, &fo.ReadTimeout, &fo.WriteTimeout, &fo.ContextTimeoutEnabled)
		if g != nil {
			d := &net.Dialer{KeepAlive: 5 * time.Minute}
			fo.Dialer = g.dialer(d.DialContext)
		}
		return redis.NewFailoverClient(fo), nil
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, urlError(rawURL, err)
	}
	connLimits(&opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.ContextTimeoutEnabled)
	opt.MaintNotificationsConfig = noMaintNotifications()
	if g != nil {
		opt.Dialer = g.dialer(redis.NewDialer(opt))
	}
	return redis.NewClient(opt), nil
}

// noMaintNotifications turns off go-redis's handling of Redis Enterprise's
// maintenance push notifications (on by default since v9.16): open-source
// Redis sends none, and each client (each cluster node's too) would keep a
// goroutine of its own for it.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// connLimits sets what the plain and the Sentinel client share (go-redis has a
// type of options for each): no command retries by go-redis (the store retries
// what is safe to retry itself); one dial attempt, so that while Redis is down
// the answer is 503 at once rather than after go-redis's five attempts (the
// client retries after Retry-After); 2 s per dial, read and write; and the
// request's context deadline honoured.
func connLimits(maxRetries, dialerRetries *int, dial, read, write *time.Duration, useContext *bool) {
	*maxRetries, *dialerRetries = -1, 1
	*dial, *read, *write = 2*time.Second, 2*time.Second, 2*time.Second
	*useContext = true
}

const sentinelScheme = "redis+sentinel"

// parseSentinelURL reads the redis+sentinel:// form NewClient documents. It never
// echoes the URL in an error: it may carry a password.
func parseSentinelURL(rawURL string) (*redis.FailoverOptions, error) {
	// net/url cannot parse a host list ("h1:1,h2:2" has a port "2,h2:2"): take the
	// hosts out, and let it parse the rest.
	rest := strings.TrimPrefix(rawURL, sentinelScheme+"://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	hosts := authority
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	u, err := url.Parse(sentinelScheme + "://" + userinfo + "sentinels" + rest[end:])
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	fo := &redis.FailoverOptions{}
	if u.User != nil {
		fo.Username = u.User.Username()
		fo.Password, _ = u.User.Password()
	}
	for _, hp := range strings.Split(hosts, ",") {
		if hp == "" {
			return nil, errors.New("empty sentinel address")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil { // no port: "h", or an IPv6 literal "[::1]"
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), "26379"
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("sentinel address %q: want host:port", hp)
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, net.JoinHostPort(host, port))
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return nil, errors.New("want /mastername or /mastername/db after the sentinel addresses")
	}
	fo.MasterName = path[0]
	if len(path) == 2 {
		if fo.DB, err = strconv.Atoi(path[1]); err != nil || fo.DB < 0 {
			return nil, fmt.Errorf("invalid database number %q", path[1])
		}
	}
	for k, v := range u.Query() {
		switch k {
		case "sentinel_username":
			fo.SentinelUsername = v[len(v)-1]
		case "sentinel_password":
			fo.SentinelPassword = v[len(v)-1]
		default:
			return nil, fmt.Errorf("unknown option %q (known: sentinel_username, sentinel_password)", k)
		}
	}
	return fo, nil
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
		s.topo = newTopology(cc)
	}
	s.disp = newDispatcher(rdb, s.topo, s.pokeLock, opt.Logger, s.m)
	go s.runClock()
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
	if s.topo != nil && !s.topo.loaded.Load() {
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
		s.gate.Lock()
		s.closed = true
		s.gate.Unlock()
		// A request whose call just failed queues its undo after the call gave
		// the gate back: wait for those requests, then for the undos.
		s.awaitUndos(time.Now().Add(closeUndoWait))
		s.opt.Gate.Close()
	})
	err := s.disp.close()
	if s.topo != nil {
		s.topo.close()
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

// evalWait runs a script and then WAIT in one pipeline: go-redis sends a
// pipeline's commands on one connection, and WAIT covers the writes made on its
// own connection. Between the two goes a PUBLISH to a channel nobody listens on,
// which Redis replicates: it moves the connection's replication offset to the
// master's latest, so that WAIT also covers a grant the script only read (one made
// on another connection, as when a release hands the lock to a polling ticket).
// On a cluster, evalWaitCluster does the same on the slot's master.
//
// Script.Run's EVALSHA-then-EVAL fallback cannot work inside a pipeline (the
// NOSCRIPT error is only known once the pipeline has run), so it is done here: a
// NOSCRIPT reply means the script did not run, and the pipeline is sent again
// with EVAL. A broken connection is returned as the script's error, since whether
// the change reached a replica is then unknown.
func (s *Store) evalWait(ctx context.Context, op *scriptOp, keys []string, args []any) ([]any, error) {
	var v []any
	var acked int64
	var err error
	if s.cluster != nil {
		var werr error
		v, acked, werr, err = s.evalWaitCluster(ctx, op, keys, args)
		if err != nil {
			return nil, err
		}
		err = werr
	} else {
		var script, wait *redis.Cmd
		eval := false
		for range 4 {
			_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				script = p.Do(ctx, s.ss.cmdArgs(op, eval, keys, args)...)
				p.Publish(ctx, s.opt.Prefix+":wait", "")
				// Pipeliner has no Wait method.
				wait = p.Do(ctx, "wait", s.opt.WaitReplicas, s.opt.WaitTimeout.Milliseconds())
				return nil
			})
			if !s.resend(ctx, script.Err(), keys[0], &eval) {
				break
			}
		}
		if v, err = script.Slice(); err != nil {
			return nil, err
		}
		acked, err = wait.Int64()
	}
	if err != nil && isConnError(err) {
		return nil, err
	}
	if (err != nil || acked < int64(s.opt.WaitReplicas)) && changesHolder(v) {
		s.unacked(op.name, acked, err)
	}
	return v, nil
}

// changesHolder reports whether a script reply may have granted, renewed, freed
// or handed on a lock: every reply but the ones that change nothing a holder
// relies on.
func changesHolder(v []any) bool {
	if len(v) == 0 {
		return false
	}
	code, _ := v[0].(string)
	switch code {
	case "busy", "queued", "not_held", "gone":
		return false
	}
	return true
}

// unacked counts a change fewer replicas acknowledged than WaitReplicas within
// WaitTimeout, and warns, at most once a second (a replica that is down would
// otherwise log every grant).
func (s *Store) unacked(op string, acked int64, err error) {
	s.m.WaitUnacked.Inc()
	now := time.Now().UnixMilli()
	last := s.unackedLog.Load()
	if now-last < 1000 || !s.unackedLog.CompareAndSwap(last, now) {
		return
	}
	ev := s.opt.Logger.Warn().Str("op", op).Int64("acked", acked).Int("wanted", s.opt.WaitReplicas).
		Dur("timeout", s.opt.WaitTimeout)
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Msg("replicas did not acknowledge a grant in time: it stands, but a failover now could lose it " +
		"(counted in baton_wait_unacked_total; warned at most once a second)")
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
	if isConnError(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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

// isDialError reports a failure to connect at all: refused, unreachable, or a
// dial that timed out.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
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
