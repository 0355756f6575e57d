package handlers

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/auth"
)

// Refusals of requests without a valid key (401) are what a stranger can make
// as many of as it likes, each for the price of a request: logged one by one
// they would fill the disk (12,000 bad keys in 4 s wrote 5 MB). So within each
// auditWindow the first auditBurst are logged in full (the audit line; 401s
// have no access-log line of their own), and the rest are counted and logged
// as one summary line at the window's end: how many, from how many peers, a
// few of them. baton_http_requests_total counts every one.

// The window and burst of the refusalLog of every server made from now on
// (tests shorten them).
var auditWindow, auditBurst atomic.Int64

func init() {
	auditWindow.Store(int64(10 * time.Second))
	auditBurst.Store(10)
}

const (
	maxSummaryPeers = 1000 // distinct peers a summary counts; more are "at least"
	peerSample      = 5    // peers a summary names
)

// refusalLog logs the audit lines of 401s, rate-limited and aggregated.
type refusalLog struct {
	log    zerolog.Logger
	window time.Duration
	burst  int

	mu         sync.Mutex
	windowEnd  time.Time
	logged     int                 // full lines in this window
	suppressed int                 // refusals since the last summary
	peers      map[string]struct{} // their distinct peer addresses (host only)
	sample     []string
	timer      *time.Timer // the pending summary
}

func newRefusalLog(log zerolog.Logger) *refusalLog {
	return &refusalLog{log: log, window: time.Duration(auditWindow.Load()), burst: int(auditBurst.Load())}
}

// unauthorized logs (or counts for the summary) the refusal of r.
func (l *refusalLog) unauthorized(r *http.Request, reason error) {
	now := time.Now()
	l.mu.Lock()
	if !now.Before(l.windowEnd) {
		l.windowEnd, l.logged = now.Add(l.window), 0
	}
	if l.logged < l.burst {
		l.logged++
		l.mu.Unlock()
		auditLine(l.log, r, auth.Anonymous, "unauthorized", reason)
		return
	}
	l.suppressed++
	if l.peers == nil {
		l.peers = make(map[string]struct{})
	}
	peer := peerHost(r.RemoteAddr)
	if _, seen := l.peers[peer]; !seen && len(l.peers) < maxSummaryPeers {
		l.peers[peer] = struct{}{}
		if len(l.sample) < peerSample {
			l.sample = append(l.sample, peer)
		}
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.windowEnd.Sub(now), l.summarize)
	}
	l.mu.Unlock()
}

// summarize logs the refusals counted since the last summary.
func (l *refusalLog) summarize() {
	l.mu.Lock()
	n, peers, sample := l.suppressed, len(l.peers), l.sample
	l.suppressed, l.peers, l.sample, l.timer = 0, nil, nil, nil
	l.mu.Unlock()
	if n == 0 {
		return
	}
	l.log.Warn().Bool("audit", true).Str("event", "unauthorized_summary").Int("count", n).
		Int("peers", peers).Bool("peers_capped", peers >= maxSummaryPeers).Strs("peer_sample", sample).
		Dur("window", l.window).
		Msgf("%d more requests without a valid key (401) were refused in the last %v, from %d peers; not logged one by one", n, l.window, peers)
}

// peerHost is the address of a RemoteAddr, without its port.
func peerHost(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// auditLine logs a refusal or a force release with who, where from and which
// route.
func auditLine(log zerolog.Logger, r *http.Request, principal, what string, err error) {
	ev := log.Info()
	if what != "force" {
		ev = log.Warn()
	}
	route := chi.RouteContext(r.Context()).RoutePattern()
	ev = ev.Bool("audit", true).Str("event", what).Str("principal", principal).Str("route", route).
		Str("peer", r.RemoteAddr).Str("request_id", requestIDOf(r))
	if err != nil {
		ev = ev.Str("reason", err.Error())
	}
	ev.Msg("audit")
}
