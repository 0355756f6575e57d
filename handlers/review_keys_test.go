package handlers_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/lua"
)

// Hostile review: keys and tombstones (review branch).

// leftKeys lists the lock's keys other than its fence key and those in keep,
// with their remaining lives.
func (e *env) leftKeys(name string, keep ...string) []string {
	e.t.Helper()
	ctx := context.Background()
	var left []string
	for _, k := range e.keys() {
		if !strings.HasPrefix(k, e.lockKey(name)) || k == e.lockKey(name)+":fence" {
			continue
		}
		kept := false
		for _, x := range keep {
			kept = kept || k == x
		}
		if !kept {
			left = append(left, k+" (pttl "+e.Redis.PTTL(ctx, k).Val().Round(time.Second).String()+")")
		}
	}
	sort.Strings(left)
	return left
}

// A fair acquire with a wait is queued; its client hangs up. The store undoes
// the ticket, as it should, and leaves a tombstone for 30 s, though the
// request's script already ran and answered (its ticket was queued): no late
// run of it can come. The tombstone is for calls without a definite answer;
// here it is one key per hang-up, for 30 s, for nothing. (A fair acquire
// answered 409 limit-mismatch at its first check leaves one the same way:
// uncertain() takes the *LimitError for a call that may still run.)
func TestReviewFairHangUpLeavesTombstone(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.acquire("tomb", map[string]any{"ttl_ms": 30000, "owner": "H"})
	// H's grant left its own tombstone, until its call's deadline (a late
	// copy of H's acquire must grant nothing): that one may stay.
	names := func(left []string) []string { // without their lives, which tick
		for i, k := range left {
			left[i], _, _ = strings.Cut(k, " ")
		}
		return left
	}
	before := names(e.leftKeys("tomb", e.lockKey("tomb")))
	ctx, hangUp := context.WithCancel(context.Background())
	c := e.send(req{Method: "POST", Path: "/v1/locks/tomb", Context: ctx,
		Body: map[string]any{"fair": true, "wait_ms": 20000, "ttl_ms": 30000, "owner": "C"}})
	pollUntil(t, 5*time.Second, "C's ticket queued", func() bool { return e.queueLen("tomb") == 1 })
	hangUp()
	<-c
	pollUntil(t, 5*time.Second, "C's ticket undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("cancelled")) >= 1
	})
	// C's queued ticket left a tombstone too, until its call's deadline (at most
	// 10 s: a late copy of C's acquire must neither grant under C's lease nor
	// queue the ticket again): that one may stay, not one for 30 s.
	left := e.leftKeys("tomb", e.lockKey("tomb"))
	var others []string
	for _, k := range left {
		if strings.Contains(k, ":x:") && !slices.Contains(before, names([]string{k})[0]) {
			_, life, _ := strings.Cut(k, "(pttl ")
			if d, err := time.ParseDuration(strings.TrimSuffix(life, ")")); err == nil && d <= 10*time.Second {
				continue
			}
		}
		others = append(others, k)
	}
	if !slices.Equal(names(slices.Clone(others)), before) {
		t.Errorf("after a queued fair waiter hung up and was undone, these keys remain: %v", left)
	}
}

// An acquire is delayed in the network past the store's timeouts: the client
// gets 503 and the store undoes the request, leaving a tombstone that makes
// the request's own script grant nothing should it run later. The tombstone
// lives 30 s; TCP delivers a delayed segment after a partition heals, with
// retransmission back-off reaching tens of seconds, and a command written
// before the connection was closed still runs. Here it reaches Redis after
// 31 s: the tombstone is gone and the script grants a 10-minute hold to a
// lease nobody was told of.
func TestReviewLateAcquireOutlivesTombstone(t *testing.T) {
	srv := redistest.Start(t)
	px := startDelayProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL()})
	e.awaitReady() // scripts loaded: EVALSHA, no EVAL

	sum := sha1.Sum([]byte(lua.Compose(lua.Acquire, lua.Defaults)))
	px.arm([]byte(hex.EncodeToString(sum[:])))
	r := e.do(req{Method: "POST", Path: "/v1/locks/ghost", Body: map[string]any{"ttl_ms": 600000, "owner": "ghost"}})
	wantStatus(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if px.heldCount() == 0 {
		t.Fatal("no acquire was held back: the test proves nothing")
	}
	pollUntil(t, 5*time.Second, "the failed acquire undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("none")) >= 1
	})
	time.Sleep(31 * time.Second) // the delay: longer than the tombstone's life
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
