// Package handlers is Baton's HTTP layer: the routes of api/openapi.yaml, JSON
// decoding and validation, problem+json errors and long-poll plumbing. It talks to
// the lock store through the Locker interface it owns.
package handlers

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/park"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/ui"
)

// Locker is what the HTTP layer needs of the lock store.
type Locker interface {
	// AcquireFunc, PollFunc and WatchFunc call their f exactly once: before they
	// return when no wait is needed, else when the wait ends.
	AcquireFunc(ctx context.Context, r store.AcquireRequest, f func(store.AcquireResult, error))
	Lease(ctx context.Context, l store.Ref) (*store.Lease, error)
	Renew(ctx context.Context, l store.Ref, ttl time.Duration) (*store.Lease, error)
	Release(ctx context.Context, l store.Ref) (store.Release, error)
	Force(ctx context.Context, name string) (bool, error)
	WatchFunc(ctx context.Context, name string, fence *int64, wait time.Duration, f func(store.State, error))
	PollFunc(ctx context.Context, t store.Ref, wait time.Duration, f func(store.PollResult, error))
	Cancel(ctx context.Context, t store.Ref) error
	CreateSession(ctx context.Context, r store.SessionRequest) (store.Session, bool, error)
	GetSession(ctx context.Context, ref store.Ref) (store.Session, error)
	RenewSession(ctx context.Context, ref store.Ref, ttl time.Duration, visible func(name string) bool) (store.Session, error)
	EndSession(ctx context.Context, ref store.Ref) (int, error)
	List(ctx context.Context, r store.ListRequest) (store.ListPage, error)
	Ready(ctx context.Context) error
	// InTurn runs f at once, or, while calls to Redis queue, once their queue
	// is short, on another goroutine (a request can park meanwhile).
	InTurn(ctx context.Context, f func(context.Context))
}

// Deps are the server's dependencies.
type Deps struct {
	Store   Locker
	Limits  Limits
	Logger  zerolog.Logger
	Metrics *metrics.Metrics
	Spec    []byte      // api/openapi.yaml, served at /openapi.yaml
	Guard   *auth.Guard // access control; nil lets everyone do everything

	// Tracer, when set, gives every request a span named by its route pattern,
	// the child of the caller's span when Propagator (default: W3C trace
	// context) finds one in its headers. Nil: no tracing.
	Tracer     trace.TracerProvider
	Propagator propagation.TextMapPropagator
	// Lot parks the connections of long-polls while they wait (package park);
	// nil keeps every request on net/http's goroutine.
	Lot *park.Lot
	// Draining is closed when the server starts shutting down: from then on
	// /readyz answers 503 at once, whatever its cached answer says. Nil: never.
	Draining <-chan struct{}
}

type server struct {
	store  Locker
	limits Limits
	log    zerolog.Logger
	m      *metrics.Metrics
	spec   []byte
	guard  *auth.Guard
	lot    *park.Lot
	// refusals logs the audit lines of 401s, rate-limited (audit.go).
	refusals *refusalLog
	ready    readiness // /readyz's cached answer (ops.go)
	draining <-chan struct{}
}

// NewServer returns the HTTP handler for the whole API. Every route is here, in
// the order of api/openapi.yaml, with the action (access control) it needs.
func NewServer(d Deps) http.Handler {
	s := &server{store: d.Store, limits: d.Limits, log: d.Logger, m: d.Metrics, spec: d.Spec, guard: d.Guard, lot: d.Lot,
		refusals: newRefusalLog(d.Logger), draining: d.Draining}
	r := chi.NewRouter()
	if d.Tracer != nil {
		r.Use(traced(d.Tracer, d.Propagator))
	}
	r.Use(s.requestID, s.observe, s.recoverer, s.bodyDeadline)
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.fail(w, r, errNotFound) })
	r.NotFound(notFound)
	r.MethodNotAllowed(s.methodNotAllowed(r))

	lock, read, admin := auth.ActionLock, auth.ActionRead, auth.ActionAdmin
	get(r, "/v1/locks", s.need(read, s.list()))
	r.Method(http.MethodPost, "/v1/locks/{name}", s.need(lock, s.acquire()))
	get(r, "/v1/locks/{name}", s.need(read, s.state()))
	r.Method(http.MethodDelete, "/v1/locks/{name}", s.need(admin, s.force()))
	get(r, "/v1/locks/{name}/leases/{lease}", s.need(lock, s.getLease()))
	r.Method(http.MethodPatch, "/v1/locks/{name}/leases/{lease}", s.need(lock, s.renew()))
	r.Method(http.MethodDelete, "/v1/locks/{name}/leases/{lease}", s.need(lock, s.release()))
	get(r, "/v1/locks/{name}/tickets/{ticket}", s.need(lock, s.poll()))
	r.Method(http.MethodDelete, "/v1/locks/{name}/tickets/{ticket}", s.need(lock, s.cancel()))

	r.Method(http.MethodPost, "/v1/sessions", s.need(lock, s.createSession()))
	get(r, "/v1/sessions/{session}", s.need(lock, s.getSession()))
	r.Method(http.MethodPatch, "/v1/sessions/{session}", s.need(lock, s.renewSession()))
	r.Method(http.MethodDelete, "/v1/sessions/{session}", s.need(lock, s.endSession()))

	get(r, "/livez", s.livez())   // open
	get(r, "/readyz", s.readyz()) // open
	get(r, "/metrics", s.need(auth.ActionMetrics, promhttp.HandlerFor(d.Metrics.Registry, promhttp.HandlerOpts{})))
	get(r, "/openapi.yaml", s.openapi()) // open

	// The dashboard: static files that hold no data, so open; the API calls it
	// makes need a key like any other client's.
	get(r, "/ui", http.RedirectHandler(ui.Prefix, http.StatusMovedPermanently)) // open
	get(r, ui.Prefix+"*", ui.Handler(notFound))                                 // open
	return r
}

// get serves GET and HEAD with the same handler: RFC 9110 expects HEAD wherever
// GET is, with the same status and headers, and net/http drops the body of an
// answer to HEAD. A HEAD runs exactly as its GET does: a long-poll waits, and a
// ticket poll claims a grant (the next GET poll returns the lease).
func get(r chi.Router, pattern string, h http.Handler) {
	r.Method(http.MethodGet, pattern, h)
	r.Method(http.MethodHead, pattern, h)
}

// fail hands an error to the one problem writer.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, zerolog.Ctx(r.Context()), keyCapError(r, err))
}

// methodNotAllowed answers 405 with the Allow header chi leaves to custom
// handlers. chi sends every method it does not know (FROB) here, whatever the
// path: a path no method serves is a 404, never a 405 with an empty Allow.
func (s *server) methodNotAllowed(mux *chi.Mux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.RawPath // chi routes on the escaped path when there is one: so must Allow
		if path == "" {
			path = r.URL.Path
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch, http.MethodDelete} {
			if mux.Match(chi.NewRouteContext(), m, path) {
				allow = append(allow, m)
			}
		}
		if allow == nil {
			s.fail(w, r, errNotFound)
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.fail(w, r, errMethodNotAllowed)
	}
}
