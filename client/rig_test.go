package client_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/batontest"
)

// The tests of Lock, Hold and Session run against a real Baton process (the
// server binary built from this tree) with API keys, on a redis-server of its
// own, behind batontest's fault-injecting proxy.

// rig is a real server, a client through its proxy (the one under test) and
// an admin client straight to it (the test's own eyes and hands).
type rig struct {
	*batontest.Server
	t     *testing.T
	C     *client.Client // the full key, through the proxy
	Admin *client.Client // the full key, straight to the server
}

func startRig(t *testing.T, env ...string) *rig {
	t.Helper()
	s := batontest.Start(t, batontest.Options{Keys: true, Env: env})
	return &rig{
		Server: s, t: t,
		C:     client.New(s.Proxy.URL, client.WithAPIKey(s.Keys.Full), client.WithRetryMaxTime(5*time.Second)),
		Admin: client.New(s.URL, client.WithAPIKey(s.Keys.Full), client.WithRetryMaxTime(0)),
	}
}

func (r *rig) ctx() context.Context { return batontest.Ctx(r.t) }

// lock takes name with r.C or fails the test.
func (r *rig) lock(name string, o client.LockOptions) *client.Hold {
	r.t.Helper()
	h, err := r.C.Lock(r.ctx(), name, o)
	if err != nil {
		r.t.Fatalf("lock %q: %v", name, err)
	}
	r.t.Cleanup(func() { _ = h.Unlock(context.Background()) })
	return h
}

// state is the lock's state, read straight from the server.
func (r *rig) state(name string) *client.LockState {
	r.t.Helper()
	st, err := r.Admin.State(r.ctx(), name)
	if err != nil {
		r.t.Fatalf("state %q: %v", name, err)
	}
	return st
}

// stillHeld fails the test unless name stays held with fence for d: a watch
// returns early when the lock is released, expires or changes hands.
func (r *rig) stillHeld(name string, fence int64, d time.Duration) {
	r.t.Helper()
	start := time.Now()
	st, err := r.Admin.Watch(r.ctx(), name, d, &fence)
	if err != nil {
		r.t.Fatalf("watch %q: %v", name, err)
	}
	if !st.Held || st.Fence != fence {
		r.t.Fatalf("after %v, %q is %+v; want held with fence %d for %v", time.Since(start).Round(time.Millisecond), name, st, fence, d)
	}
}

// count is how many requests the proxy saw on paths starting with prefix.
func (r *rig) count(prefix string) int { return r.Proxy.Count(prefix) }

// eventually polls cond until it holds, or fails the test after 10 s. It is
// for conditions no API announces (a proxy's counter, a queue length).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitLost fails the test unless h is lost within d, and returns how long
// that took.
func awaitLost(t *testing.T, h *client.Hold, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-h.Lost():
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%q not lost within %v", h.Name(), d)
		return 0
	}
}

// notLost fails the test if h is lost.
func notLost(t *testing.T, h *client.Hold) {
	t.Helper()
	select {
	case <-h.Lost():
		t.Fatalf("%q lost: %v", h.Name(), h.Err())
	default:
	}
	if err := h.Err(); err != nil {
		t.Fatalf("%q: Err %v while not lost", h.Name(), err)
	}
}

// leasePath is the path of h's lease, for the proxy's counter.
func leasePath(h *client.Hold) string { return h.Lease().URL }

// recorder records the requests a client sends.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, idemKey, auth, body string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	q := recorded{method: req.Method, path: req.URL.Path, idemKey: req.Header.Get("Idempotency-Key"),
		auth: req.Header.Get("Authorization")}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			body, _ := io.ReadAll(b)
			q.body = string(body)
		}
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, q)
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) posts() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, q := range r.reqs {
		if q.method == http.MethodPost {
			out = append(out, q)
		}
	}
	return out
}
