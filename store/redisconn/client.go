package redisconn

import (
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

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
// to the store (store.Options.Gate), which closes it when Redis stops answering. A
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

// newClusterClient is NewClient for a cluster URL.
func newClusterClient(rawURL string) (redis.UniversalClient, error) {
	o, err := parseClusterURL(rawURL)
	if err != nil {
		return nil, urlError(rawURL, err)
	}
	connLimits(&o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ContextTimeoutEnabled)
	// MOVED and ASK are followed (the command did not run); no other error is
	// retried, whatever the command: see OnceCmd.
	o.MaxRedirects = 8
	o.DisableRoutingPolicies = true
	o.MaintNotificationsConfig = noMaintNotifications()
	return redis.NewClusterClient(o), nil
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
