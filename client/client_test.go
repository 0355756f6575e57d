package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// The client tests run against the whole server stack (handlers, store, a real
// redis-server) over httptest, each with a key prefix of its own.

var sharedRedis *redistest.Server

func TestMain(m *testing.M) {
	s, stop := redistest.MustStartMain()
	sharedRedis = s
	srv, err := startServer()
	if err != nil {
		stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	baseURL = srv.URL // for the examples
	code := m.Run()
	srv.stop()
	stop()
	os.Exit(code)
}

// server is one Baton server over httptest.
type server struct {
	URL     string
	Store   *store.Store
	Metrics *metrics.Metrics
	conns   atomic.Int64 // connections accepted
	stop    func()
	// drain starts a shutdown as cmd/server does: /readyz turns 503 at once,
	// long-polls are answered.
	drain func()
}

var prefixSeq atomic.Int64

// startServer starts handlers and store on the shared Redis with a fresh key
// prefix and the limits of API.md.
func startServer() (*server, error) {
	rdb, err := redisconn.NewClient(sharedRedis.URL())
	if err != nil {
		return nil, err
	}
	prefix := "c" + strconv.FormatInt(prefixSeq.Add(1), 10) + "x" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	m := metrics.New()
	st := store.New(rdb, store.Options{Prefix: prefix, Logger: zerolog.Nop(), Metrics: m})
	draining := make(chan struct{})
	h := handlers.NewServer(handlers.Deps{
		Draining: draining,
		Store:    st,
		Limits:   handlers.Limits{DefaultTTL: 30 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second},
		Logger:   zerolog.Nop(),
		Metrics:  m,
		Spec:     api.Spec,
	})
	var drainOnce sync.Once
	s := &server{Store: st, Metrics: m, drain: func() { drainOnce.Do(func() { close(draining); st.Shutdown() }) }}
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ConnState = func(_ net.Conn, cs http.ConnState) {
		if cs == http.StateNew {
			s.conns.Add(1)
		}
	}
	hs.Start()
	s.URL = hs.URL
	s.stop = func() {
		st.Shutdown()
		hs.Close()
		_ = st.Close()
		_ = rdb.Close()
	}
	return s, nil
}

// env is a server of the test's own and a default client for it.
type env struct {
	t testing.TB
	*server
	C *client.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	s, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return &env{t: t, server: s, C: client.New(s.URL + "/")} // the trailing slash is trimmed
}

// ctx is a context for one test step, cancelled when the test ends.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// acquire takes the lock or fails the test.
func (e *env) acquire(name string, o client.AcquireOptions) *client.Lease {
	e.t.Helper()
	res, err := e.C.Acquire(e.ctx(), name, o)
	if err != nil {
		e.t.Fatalf("acquire %q: %v", name, err)
	}
	if res.Lease == nil {
		e.t.Fatalf("acquire %q: got ticket %+v, want a lease", name, res.Ticket)
	}
	return res.Lease
}

// awaitWaiters blocks until the server holds n long-polls (the request is parked).
func (e *env) awaitWaiters(n float64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(e.Metrics.Waiters) != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("waiters %v, want %v", testutil.ToFloat64(e.Metrics.Waiters), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantProblem fails the test unless err matches want and carries a *Problem
// with the given status; it returns the Problem.
func wantProblem(t testing.TB, err, want error, status int) *client.Problem {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want %v", err, want)
	}
	var p *client.Problem
	if !errors.As(err, &p) {
		t.Fatalf("got %T %v, want a *client.Problem", err, err)
	}
	if p.Status != status {
		t.Fatalf("status %d, want %d (%v)", p.Status, status, err)
	}
	return p
}

func TestReadyLive(t *testing.T) {
	e := newEnv(t)
	if err := e.C.Live(e.ctx()); err != nil {
		t.Fatalf("live: %v", err)
	}
	if err := e.C.Ready(e.ctx()); err != nil {
		t.Fatalf("ready: %v", err)
	}
	e.drain()
	p := wantProblem(t, e.C.Ready(e.ctx()), client.ErrUnavailable, http.StatusServiceUnavailable)
	if p.RetryAfter != time.Second || p.RequestID == "" {
		t.Fatalf("RetryAfter %v, RequestID %q; want 1s and an id", p.RetryAfter, p.RequestID)
	}
	if err := e.C.Live(e.ctx()); err != nil {
		t.Fatalf("live while shutting down: %v", err)
	}
}

// TestConnectionsReused checks that bodies are drained, error bodies included,
// so that sequential calls share a connection. net/http gives a connection back
// to the pool only once it has seen the request written, waiting for that at most
// 50ms, so a loaded machine may open a few more; undrained bodies would open one
// per call.
func TestConnectionsReused(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("reuse", client.AcquireOptions{})
	for range 50 {
		if _, err := e.C.Acquire(e.ctx(), "reuse", client.AcquireOptions{}); !errors.Is(err, client.ErrLockHeld) {
			t.Fatalf("got %v, want ErrLockHeld", err)
		}
		if _, err := e.C.Lease(e.ctx(), "reuse", l.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.C.Release(e.ctx(), "reuse", "unknownunknownunknown00"); !errors.Is(err, client.ErrLeaseNotHeld) {
			t.Fatalf("got %v, want ErrLeaseNotHeld", err)
		}
	}
	if n := e.conns.Load(); n > 5 {
		t.Fatalf("%d connections for 150 sequential calls, want 1 (a few under load)", n)
	}
}

func TestContextBoundsWait(t *testing.T) {
	e := newEnv(t)
	e.acquire("ctx", client.AcquireOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := e.C.Acquire(ctx, "ctx", client.AcquireOptions{Wait: 10 * time.Second})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
}
