// Package metrics holds Baton's Prometheus collectors, in one place because both the
// HTTP layer and the store update them. Every name starts with baton_; lock names
// are never labels (their number is unbounded).
package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is one process's set of collectors, on its own registry.
type Metrics struct {
	Registry *prometheus.Registry

	// Requests and Duration are labelled by route pattern ("unmatched" for no
	// route), method (GET, HEAD, POST, PATCH, DELETE, OPTIONS, PUT or "other")
	// and status: fixed sets, never a value a client chose.
	Requests         *prometheus.CounterVec   // route, method, status, principal
	Duration         *prometheus.HistogramVec // route, method, status
	Acquires         *prometheus.CounterVec   // outcome
	Waiters          prometheus.Gauge
	Handoff          prometheus.Histogram
	RedisErrors      prometheus.Counter
	PubSubReconnects prometheus.Counter
	PubSubConns      prometheus.Gauge
	WaitUnacked      prometheus.Counter
	AuthReloadErrors prometheus.Counter
	Undos            *prometheus.CounterVec // what
	BodyReadTimeouts prometheus.Counter
	WaitersMax       prometheus.Gauge // BATON_MAX_WAITERS, for alerts on Waiters
	CallsQueued      prometheus.Gauge
	QueueWait        prometheus.Histogram
	Overloaded       *prometheus.CounterVec // reason
	Conns            prometheus.Gauge       // open client connections
	ConnsMax         prometheus.Gauge       // BATON_MAX_CONNS
	ConnsRefused     prometheus.Counter

	redisDown atomic.Pointer[func() bool] // RedisDown's probe
}

// New returns collectors registered on a fresh registry, with the Go runtime and
// process collectors beside them.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_http_requests_total",
			Help: "HTTP requests answered, by route pattern (or unmatched), method (GET, HEAD, POST, PATCH, DELETE, OPTIONS, PUT or other), status and principal (the API key's name, @loopback, @anyone, or anonymous before authentication).",
		}, []string{"route", "method", "status", "principal"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_http_request_duration_seconds",
			Help:    "HTTP request latency, by route pattern, method and status. Long-polls included.",
			Buckets: []float64{.0002, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "method", "status"}),
		Acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_acquires_total",
			Help: "Acquire requests by outcome: granted, reentered, queued, held, not_held, too_many_waiters, abandoned (granted or queued for a client that had gone, and undone), error.",
		}, []string{"outcome"}),
		Waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_waiters",
			Help: "Long-polls this process holds now (acquire waits, ticket polls, watches).",
		}),
		Handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_handoff_latency_seconds",
			Help:    "Time from a lock being handed to a waiting request (or freed for it) to that request holding the lease.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		RedisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_redis_errors_total",
			Help: "Redis calls that failed (unreachable, timeout, or an error reply).",
		}),
		PubSubReconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_pubsub_resubscribes_total",
			Help: "Times the pub/sub connection was re-established and its waiters re-checked.",
		}),
		PubSubConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_pubsub_connections",
			Help: "Pub/sub connections this process keeps: one on one Redis (or Sentinel), one per master on a Redis Cluster.",
		}),
		WaitUnacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_wait_unacked_total",
			Help: "Grants (and renewals, releases, forces) that fewer replicas than BATON_WAIT_REPLICAS acknowledged within BATON_WAIT_TIMEOUT. Each still stood.",
		}),
		AuthReloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_auth_reload_errors_total",
			Help: "Reloads of the keys file (SIGHUP or a change) that failed: nothing was added or changed, and keys gone from the file were revoked.",
		}),
		Undos: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_abandoned_undone_total",
			Help: "Requests whose client went away, or whose Redis call failed without a definite answer, undone in the background, by what was found: released (a hold), cancelled (a ticket), unclaimed (a ticket's grant kept for its next poll), queued, gone, none, dropped (backlog full).",
		}, []string{"what"}),
	}
	m.BodyReadTimeouts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "baton_body_read_timeouts_total",
		Help: "Requests whose body did not arrive within the body read timeout (answered 408, connection closed).",
	})
	m.WaitersMax = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_waiters_max",
		Help: "The most long-polls this process holds at once (BATON_MAX_WAITERS); beyond it, 429 too-many-waiters.",
	})
	m.CallsQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_redis_calls_queued",
		Help: "Redis script calls waiting for a turn on a connection (at most one fewer than the pool's connections are in flight per Redis).",
	})
	m.QueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "baton_redis_queue_wait_seconds",
		Help:    "How long Redis script calls that found every turn taken waited for one (or until they were refused).",
		Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	m.Overloaded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_overloaded_total",
		Help: "Redis calls refused, before anything was sent, because this process was past its bounds (each answered 503 overloaded), by reason: queue_full (BATON_MAX_QUEUED_CALLS calls waited already), queue_wait (one waited BATON_MAX_QUEUE_WAIT), pool_timeout (go-redis's pool had no connection in time).",
	}, []string{"reason"})
	m.Conns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_connections",
		Help: "Client connections open now (parked long-polls and idle keep-alives included).",
	})
	m.ConnsMax = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_connections_max",
		Help: "The most client connections this process keeps open at once (BATON_MAX_CONNS); beyond it, new ones are closed at once.",
	})
	m.ConnsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "baton_connections_refused_total",
		Help: "Client connections closed as soon as accepted because BATON_MAX_CONNS were open.",
	})
	redisUp := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_redis_up",
		Help: "1 while Redis answers as far as this process knows; 0 from a call that could not reach it until a probe gets an answer (the store's health gate).",
	}, func() float64 {
		if down := m.redisDown.Load(); down != nil && (*down)() {
			return 0
		}
		return 1
	})
	m.Registry.MustRegister(m.Requests, m.Duration, m.Acquires, m.Waiters, m.Handoff,
		m.RedisErrors, m.PubSubReconnects, m.PubSubConns, m.WaitUnacked, m.AuthReloadErrors, m.Undos, m.BodyReadTimeouts,
		m.WaitersMax, m.CallsQueued, m.QueueWait, m.Overloaded, m.Conns, m.ConnsMax, m.ConnsRefused, redisUp,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// RedisDown makes baton_redis_up report down() (true: 0) at each scrape.
func (m *Metrics) RedisDown(down func() bool) { m.redisDown.Store(&down) }
