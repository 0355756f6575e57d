package handlers_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/lua"
)

// Hostile review: keys and tombstones (review branch).

// leftKeys lists the lock's keys other than the lock's own, with their
// remaining lives.
func (e *env) leftKeys(name string) []string {
	e.t.Helper()
	ctx := context.Background()
	var left []string
	for _, k := range e.keys() {
		if strings.HasPrefix(k, e.lockKey(name)) && k != e.lockKey(name) {
			left = append(left, k+" (pttl "+e.Redis.PTTL(ctx, k).Val().Round(time.Second).String()+")")
		}
	}
	sort.Strings(left)
	return left
}

// A fair acquire with a wait is queued; its client hangs up. Its ticket is
// undone at once, and nothing of the request is left in Redis: no ticket, no
// key kept "in case" a copy of its call runs late (its call was answered).
func TestFairWaiterHungUpLeavesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.acquire("tomb", map[string]any{"ttl_ms": 30000, "owner": "H"})
	ctx, hangUp := context.WithCancel(context.Background())
	c := e.send(req{Method: "POST", Path: "/v1/locks/tomb", Context: ctx,
		Body: map[string]any{"fair": true, "wait_ms": 20000, "ttl_ms": 30000, "owner": "C"}})
	pollUntil(t, 5*time.Second, "C's ticket queued", func() bool { return e.queueLen("tomb") == 1 })
	hangUp()
	<-c
	pollUntil(t, 5*time.Second, "C's ticket undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("cancelled")) >= 1
	})
	if left := e.leftKeys("tomb"); len(left) > 0 {
		t.Errorf("after a queued fair waiter hung up and was undone, these keys remain: %v", left)
	}
	if st := e.state("tomb"); st.Str("owner") != "H" || st.Int("waiters") != 0 {
		t.Errorf("lock after C left: %s, want H holding and nobody queued", st.Raw)
	}
}

// An acquire is delayed in the network past the store's timeouts: the client
// gets 503 and the store undoes the request. TCP delivers a delayed segment
// after a partition heals, with retransmission back-off reaching tens of
// seconds, and a command written before the connection was closed still runs.
// Delivered any time after its "not after", the acquire changes nothing: the
// lock is not held by a lease nobody was told of.
func TestLateAcquireToldItFailedGrantsNothing(t *testing.T) {
	srv := redistest.Start(t)
	px := startDelayProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL()})
	e.awaitReady() // scripts loaded: EVALSHA, no EVAL

	px.arm([]byte(lua.Build(lua.Defaults).Func["acquire"]))
	r := e.do(req{Method: "POST", Path: "/v1/locks/ghost", Body: map[string]any{"ttl_ms": 600000, "owner": "ghost"}})
	wantStatus(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if px.heldCount() == 0 {
		t.Fatal("no acquire was held back: the test proves nothing")
	}
	pollUntil(t, 5*time.Second, "the failed acquire undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("none")) >= 1
	})
	time.Sleep(2 * time.Second) // the delay: past any call's "not after" (1.5 s)
	base := scriptCalls(t, e)
	n := px.heldCount()
	px.deliver()
	e.awaitCalls(base + n)
	st := e.do(req{Method: "GET", Path: "/v1/locks/ghost"})
	if st.Bool("held") {
		t.Errorf("the lock is held after a delayed acquire its client was told failed (503): %s", st.Raw)
	}
}

// LockState's waiters (and the 423 body's, and a ticket's position) count the
// queue's entries, dead tickets included: only a dead ticket at the head is
// pruned. A ticket whose client went away is counted until it reaches the
// head, for as long as the tickets ahead of it wait.
func TestReviewWaitersCountDeadTickets(t *testing.T) {
	const tt = time.Second
	e := newEnv(t, envOptions{TicketTTL: tt})
	e.acquire("cnt", map[string]any{"ttl_ms": 30000, "owner": "H"})
	a := e.enqueue("cnt", map[string]any{"owner": "A"})
	pa := e.send(req{Method: "GET", Path: a.Str("url") + "?wait_ms=5000"})
	e.enqueue("cnt", map[string]any{"owner": "dead"}) // never polled again
	c := e.enqueue("cnt", map[string]any{"owner": "C"})
	pc := e.send(req{Method: "GET", Path: c.Str("url") + "?wait_ms=5000"})
	e.awaitWaiters(2)
	time.Sleep(tt + 500*time.Millisecond) // the unpolled ticket expires
	st := e.do(req{Method: "GET", Path: "/v1/locks/cnt"})
	if st.Int("waiters") != 2 {
		t.Errorf("state waiters %d, want 2 (A and C; the third ticket expired): %s", st.Int("waiters"), st.Raw)
	}
	r := e.do(req{Method: "POST", Path: "/v1/locks/cnt", Body: map[string]any{}})
	if r.Status == http.StatusLocked && r.Int("waiters") != 2 {
		t.Errorf("423 waiters %d, want 2", r.Int("waiters"))
	}
	for _, ch := range []<-chan answer{pa, pc} {
		<-ch
	}
	if p := e.poll(c.Str("url"), 0); p.Int("position") != 2 {
		t.Errorf("C's position %d, want 2 (only A is ahead of it)", p.Int("position"))
	}
}
