package handlers_test

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
)

// waitFor polls cond, generously, until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 60s", what)
		}
		time.Sleep(time.Millisecond) // a gauge: there is no event to wait on
	}
}

func TestAServerPastItsQueueBoundAnswersOverloadedWithRetryAfter(t *testing.T) {
	srv := redistest.Start(t)
	// Two connections: one turn for script calls, and a queue of one.
	e := newEnv(t, envOptions{Redis: srv, RedisURL: srv.URL() + "?pool_size=2", MaxQueuedCalls: 1})
	e.acquire("warm", nil) // the clock is sampled, the library loaded

	srv.Freeze()
	t.Cleanup(srv.Thaw)
	held := make(chan *resp, 2)
	for _, name := range []string{"a", "b"} {
		go func() { held <- e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{}}) }()
	}
	waitFor(t, "a call queued", func() bool { return testutil.ToFloat64(e.Metrics.CallsQueued) == 1 })

	for range 3 {
		r := e.do(req{Method: "POST", Path: "/v1/locks/c", Body: map[string]any{}})
		wantStatus(t, r, http.StatusServiceUnavailable, "overloaded")
		if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 || n > 3 {
			t.Fatalf("Retry-After %q, want 1 to 3 s", r.Header.Get("Retry-After"))
		}
	}
	if n := testutil.ToFloat64(e.Metrics.Overloaded.WithLabelValues("queue_full")); n != 3 {
		t.Fatalf("baton_overloaded_total{reason=queue_full} %v, want 3", n)
	}

	srv.Thaw()
	for range 2 {
		wantStatus(t, <-held, http.StatusCreated, "")
	}
	for _, k := range e.keys() {
		if k == e.Prefix+":{c}" {
			t.Fatalf("an overloaded request left %s", k)
		}
	}
}

func TestABurstOfLongPollsFarBeyondThePoolAllWait(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, envOptions{Redis: srv, RedisURL: srv.URL() + "?pool_size=2&pool_timeout=1ms"})
	e.acquire("burst", map[string]any{"ttl_ms": 60000})
	const n = 200
	answers := make(chan *resp, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers <- e.do(req{Method: "POST", Path: "/v1/locks/burst", Body: map[string]any{"wait_ms": 60000}})
		}()
	}
	close(start)
	waitFor(t, "all waiting", func() bool { return testutil.ToFloat64(e.Metrics.Waiters) == n || len(answers) > 0 })
	if len(answers) > 0 {
		r := <-answers
		t.Fatalf("%d long-polls of %d answered during the burst; first: %d %s", len(answers)+1, n, r.Status, r.Raw)
	}
	e.Store.Shutdown() // each is answered: still held
	wg.Wait()
	for range n {
		wantStatus(t, <-answers, http.StatusLocked, "lock-held")
	}
}
