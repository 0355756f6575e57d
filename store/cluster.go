package store

import (
	"context"
	"crypto/tls"
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
)

// Redis Cluster.
//
// Every key of a lock, its tickets and its channel share the slot of {name};
// a session's keys share the slot of its own tag. So every script touches one
// slot, and go-redis's cluster client sends it to the slot's master, following
// MOVED and ASK. Three things the cluster client does not do for the store are
// done here, from a slot map of the store's own (topology):
//
//   - pub/sub: the scripts announce with SPUBLISH (lua.Settings.Sharded), and
//     the dispatcher keeps one SSUBSCRIBE connection per master (link), each
//     lock's channel on the master of its slot, moved when the slot moves;
//   - WAIT: it covers the writes of its own connection, so with
//     WaitReplicas the script, a replicated bump and WAIT go in one pipeline
//     on a connection to the slot's master (evalWaitCluster);
//   - the clock: each master has its own, so "not after" deadlines and
//     handoff latencies use the offset of the lock's master.

const (
	clusterScheme    = "redis+cluster"
	clusterTLSScheme = "rediss+cluster"
)

// isClusterURL reports whether rawURL names a Redis Cluster.
func isClusterURL(rawURL string) bool {
	return strings.HasPrefix(rawURL, clusterScheme+"://") || strings.HasPrefix(rawURL, clusterTLSScheme+"://")
}

// parseClusterURL reads
//
//	redis+cluster://[[user]:password@]host1:port1[,host2:port2...][/0]
//	rediss+cluster://... (TLS; each node's certificate is checked against the
//	host of its address)
//
// The hosts are seeds: the client learns the other nodes from them. A port
// left out is 6379. It never echoes the URL in an error: it may carry a
// password.
func parseClusterURL(rawURL string) (*redis.ClusterOptions, error) {
	scheme := clusterScheme
	if strings.HasPrefix(rawURL, clusterTLSScheme+"://") {
		scheme = clusterTLSScheme
	}
	rest := strings.TrimPrefix(rawURL, scheme+"://")
	// The userinfo ends at the last '@' (a password may hold '@', '/', '?'
	// or '#' unencoded); the seeds, database and options follow it.
	o := &redis.ClusterOptions{}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err1, err2 error
		o.Username, err1 = url.PathUnescape(user)
		o.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, errors.New("the user name or password is not validly %-encoded")
		}
		rest = rest[at+1:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	hosts := rest[:end]
	u, err := url.Parse("redis://seeds" + rest[end:])
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	for _, hp := range strings.Split(hosts, ",") {
		if hp == "" {
			return nil, errors.New("empty cluster node address")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil { // no port: "h", or an IPv6 literal "[::1]"
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), "6379"
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("cluster node address %q: want host:port", hp)
		}
		o.Addrs = append(o.Addrs, net.JoinHostPort(host, port))
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("a cluster has only database 0, not %q", p)
	}
	if len(u.Query()) > 0 || u.Fragment != "" {
		return nil, errors.New("a cluster URL takes no options")
	}
	if scheme == clusterTLSScheme {
		// No ServerName: each node's is the host it is dialled at.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// urlError is the error of a URL that did not parse, without its text when
// the URL has a user name or password: parsers quote the parts they refuse,
// and a password with an unencoded '/', '%' or '?' lands in such a part.
func urlError(rawURL string, err error) error {
	if strings.Contains(rawURL, "@") {
		return errors.New("parse redis url: not a valid URL (the user name and password must be %-encoded)")
	}
	return fmt.Errorf("parse redis url: %w", err)
}

// newClusterClient is NewClient for a cluster URL.
func newClusterClient(rawURL string) (redis.UniversalClient, error) {
	o, err := parseClusterURL(rawURL)
	if err != nil {
		return nil, urlError(rawURL, err)
	}
	connLimits(&o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ContextTimeoutEnabled)
	// MOVED and ASK are followed (the command did not run); no other error is
	// retried, whatever the command: see onceCmd.
	o.MaxRedirects = 8
	o.DisableRoutingPolicies = true
	o.MaintNotificationsConfig = noMaintNotifications()
	return redis.NewClusterClient(o), nil
}

// onceCmd is a command the cluster client must not send again after a
// connection error or timeout: it may have run. (go-redis's cluster client
// retries those errors once on the same node and once more on another,
// whatever MaxRetries says, unless the command says NoRetry.) Redirections are
// still followed: a MOVED or ASK reply means it did not run.
type onceCmd struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// tryAgainBudget bounds how long a call waits out a slot's migration.
const tryAgainBudget = 2 * time.Second

// tryAgain reports whether a call that failed with err should be sent again,
// after waiting its turn: a TRYAGAIN reply (a script on a slot being migrated
// names a key that is on the other node, or on neither) says it did not run,
// and a slot's migration usually ends within milliseconds. Bounded by the
// call's context and by tryAgainBudget.
func tryAgain(ctx context.Context, err error, attempt int) bool {
	if !redis.HasErrorPrefix(err, "TRYAGAIN") {
		return false
	}
	pause := tryAgainPause(attempt)
	if pause == 0 {
		return false
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tryAgainPause is the pause before attempt+1: 10 ms doubling to 200 ms, 0
// once tryAgainBudget is spent.
func tryAgainPause(attempt int) time.Duration {
	var spent time.Duration
	for i := 0; ; i++ {
		p := min(10*time.Millisecond<<min(i, 5), 200*time.Millisecond)
		if spent+p > tryAgainBudget {
			return 0
		}
		if i == attempt {
			return p
		}
		spent += p
	}
}

// topology is the store's own map of slots to masters, and a client per
// master for what must reach one node: pub/sub links, WAIT pipelines, TIME.
// It is loaded with CLUSTER SLOTS at start, every topologyEvery, and soon after
// anything suggests it changed (refresh): a MOVED reply, a link that broke, a
// channel the server unsubscribed. Between loads a MOVED reply moves its slot
// at once (moved).
type topology struct {
	cc   *redis.ClusterClient
	opts *redis.ClusterOptions

	mu      sync.Mutex
	slots   []string // 16384 entries: the master's address, "" unknown
	version uint64   // grows with every change to slots
	nodes   map[string]*redis.Client
	gone    map[string]time.Time // nodes with a client and no slot: since when
	closed  bool

	kick     chan struct{} // a refresh is wanted
	onChange []func()      // each called (outside mu) after slots changed
	done     chan struct{}
	wg       sync.WaitGroup
	loaded   atomic.Bool
}

// topologyEvery is how often the slot map is loaded without a reason.
const topologyEvery = 2 * time.Second

// topologyMinGap spaces out loads asked for by events.
const topologyMinGap = 50 * time.Millisecond

func newTopology(cc *redis.ClusterClient) *topology {
	t := &topology{
		cc:    cc,
		opts:  cc.Options(),
		slots: make([]string, 16384),
		nodes: make(map[string]*redis.Client),
		gone:  make(map[string]time.Time),
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	t.wg.Add(1)
	go t.run()
	return t
}

func (t *topology) run() {
	defer t.wg.Done()
	tick := time.NewTicker(topologyEvery)
	defer tick.Stop()
	t.load()
	for {
		select {
		case <-t.done:
			return
		case <-tick.C:
		case <-t.kick:
		}
		t.load()
		select { // events that came during the load are covered by the next one
		case <-t.done:
			return
		case <-time.After(topologyMinGap):
		}
	}
}

// refresh asks for a load soon.
func (t *topology) refresh() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// load reads CLUSTER SLOTS from the nodes the cluster client knows, trying
// seeds and masters until one answers.
func (t *topology) load() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ranges, err := t.cc.ClusterSlots(ctx).Result()
	if err != nil {
		return
	}
	next := make([]string, 16384)
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		for s := r.Start; s <= r.End && s < 16384; s++ {
			next[s] = r.Nodes[0].Addr
		}
	}
	t.mu.Lock()
	changed := false
	for i := range next {
		if next[i] != t.slots[i] {
			changed = true
			break
		}
	}
	if changed {
		t.slots = next
		t.version++
	}
	fs := t.onChange
	t.mu.Unlock()
	t.loaded.Store(true)
	if changed {
		for _, f := range fs {
			f()
		}
	}
	t.closeGone()
}

// nodeGrace is how long a node serves no slot before its client is closed:
// what was sent to it just before it lost its slots may still be answering.
const nodeGrace = topologyEvery

// closeGone closes the clients (and their pools of connections) of the nodes
// that have served no slot for nodeGrace: a master demoted by a failover, a
// node gone for good. The dispatcher drops its links to them by itself
// (dropIdle); a client is made again if the node comes back as a master.
func (t *topology) closeGone() {
	t.mu.Lock()
	masters := map[string]bool{}
	for _, a := range t.slots {
		masters[a] = true
	}
	now := time.Now()
	var stale []*redis.Client
	for addr, c := range t.nodes {
		since, ok := t.gone[addr]
		switch {
		case masters[addr]:
			delete(t.gone, addr)
		case !ok:
			t.gone[addr] = now
		case now.Sub(since) >= nodeGrace:
			delete(t.nodes, addr)
			delete(t.gone, addr)
			stale = append(stale, c)
		}
	}
	t.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
}

// listen has f called after every change to the slot map.
func (t *topology) listen(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = append(t.onChange, f)
}

// master is the address of the master of key's slot, "" while unknown.
func (t *topology) master(key string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.slots[slot(key)]
}

// moved records a MOVED reply: slot now lives at addr. A full load follows.
func (t *topology) moved(slotNo int, addr string) {
	t.mu.Lock()
	changed := slotNo >= 0 && slotNo < len(t.slots) && t.slots[slotNo] != addr
	if changed {
		t.slots[slotNo] = addr
		t.version++
	}
	fs := t.onChange
	t.mu.Unlock()
	t.refresh()
	if changed {
		for _, f := range fs {
			f()
		}
	}
}

// masters are the addresses that serve at least one slot.
func (t *topology) masters() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, a := range t.slots {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// node returns the client of the node at addr, made on first use with the
// cluster client's settings (credentials, TLS, timeouts, no retries).
func (t *topology) node(addr string) *redis.Client {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.nodes[addr]; c != nil {
		return c
	}
	o := t.opts
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		Username:                 o.Username,
		Password:                 o.Password,
		TLSConfig:                o.TLSConfig,
		Dialer:                   o.Dialer,
		MaxRetries:               o.MaxRetries,
		DialerRetries:            o.DialerRetries,
		DialTimeout:              o.DialTimeout,
		ReadTimeout:              o.ReadTimeout,
		WriteTimeout:             o.WriteTimeout,
		ContextTimeoutEnabled:    o.ContextTimeoutEnabled,
		PoolSize:                 o.PoolSize,
		MaintNotificationsConfig: noMaintNotifications(),
	})
	if t.closed {
		_ = c.Close()
		return c // closed: every call fails with ErrClosed
	}
	t.nodes[addr] = c
	return c
}

func (t *topology) close() {
	select {
	case <-t.done:
		return
	default:
	}
	close(t.done)
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, c := range t.nodes {
		_ = c.Close()
	}
}

// redirect reads a MOVED or ASK error: its kind, slot and address.
func redirect(err error) (kind string, slotNo int, addr string, ok bool) {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return "", 0, "", false
	}
	f := strings.Fields(rerr.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return "", 0, "", false
	}
	// Redis writes an IPv6 address unbracketed ("::1:7001"): the port is
	// after the last colon.
	addr = f[2]
	if i := strings.LastIndexByte(addr, ':'); i > 0 && !strings.HasPrefix(addr, "[") {
		addr = net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return f[0], n, addr, true
}

// evalWaitCluster is evalWait on a cluster: the script, an SPUBLISH to a
// channel of the script's own slot that nobody listens on (replicated like
// the script's writes, it moves the connection's replication offset to the
// shard's latest, as PUBLISH does on one Redis), and WAIT, in one pipeline on
// one connection to the slot's master. A MOVED reply sends the pipeline to the
// new master, an ASK reply to the importing one behind ASKING (neither ran the
// script); NOSCRIPT sends it again with EVAL.
func (s *Store) evalWaitCluster(ctx context.Context, op *scriptOp, keys []string, args []any) (v []any, acked int64, waitErr error, err error) {
	addr := s.topo.master(keys[0])
	if addr == "" {
		c, err := s.cluster.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, nil, err
		}
		addr = c.Options().Addr
	}
	asking, eval := false, false
	tries := 0 // TRYAGAIN replies waited out
	for i := 0; i < 8; i++ {
		var script, wait *redis.Cmd
		_, _ = s.topo.node(addr).Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "asking")
			}
			script = onceCmd{redis.NewCmd(ctx, s.ss.cmdArgs(op, eval, keys, args)...)}.Cmd
			_ = p.Process(ctx, onceCmd{script})
			if asking {
				p.Do(ctx, "asking")
			}
			p.SPublish(ctx, keys[0]+":wait", "")
			wait = p.Do(ctx, "wait", s.opt.WaitReplicas, s.opt.WaitTimeout.Milliseconds())
			return nil
		})
		if kind, slotNo, to, ok := redirect(script.Err()); ok {
			if kind == "MOVED" {
				s.topo.moved(slotNo, to)
			}
			addr, asking = to, kind == "ASK"
			continue
		}
		if s.resend(ctx, script.Err(), keys[0], &eval) {
			continue
		}
		if tryAgain(ctx, script.Err(), tries) {
			tries++
			i-- // not a redirect
			continue
		}
		v, err = script.Slice()
		if err != nil {
			return nil, 0, nil, err
		}
		acked, waitErr = wait.Int64()
		return v, acked, waitErr, nil
	}
	return nil, 0, nil, fmt.Errorf("%w: redirected too often", ErrUnavailable)
}

// clusterErr has the cluster client and the slot map loaded afresh after an
// error that may mean a node is gone: go-redis's cluster client would, when it
// retries, but the store's scripts are sent once (onceCmd).
func (s *Store) clusterErr(err error) {
	if s.cluster == nil || err == nil {
		return
	}
	if isConnError(err) || redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "MOVED") {
		s.cluster.ReloadState(context.Background())
		s.topo.refresh()
	}
}

// slot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash tag,
// or of the whole key when it has none, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
