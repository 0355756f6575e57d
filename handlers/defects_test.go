package handlers_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
)

// Tests of the defects a hostile review found (issue 17): holds nobody knows,
// left by a fair waiter that hung up or by a Redis call that timed out, and a
// watch that slept through a change of hands by expiry. Each failed before its fix.

// heldBy reports whether the lock is held with the owner label.
func (e *env) heldBy(name, owner string) bool {
	e.t.Helper()
	st := e.do(req{Method: "GET", Path: "/v1/locks/" + name})
	return st.Bool("held") && st.Str("owner") == owner
}

// queueLen is the number of entries in the lock's queue.
func (e *env) queueLen(name string) int64 {
	return e.Redis.ZCard(context.Background(), e.lockKey(name)+":q").Val()
}

// A fair acquire with wait_ms whose client hangs up while the holder releases:
// whatever it was granted is released at once (handed to the next ticket), its
// ticket is gone, and the grant is not counted as granted. The server learns of
// a hang-up when its connection says so, a moment after the client closed it:
// a grant it answered before then (its access log says 201) is a grant like
// any other, which the client would have read had it stayed; the trial then
// takes the lock back by force. Most trials must see the hang-up first.
func TestFairWaiterHangsUp(t *testing.T) {
	e := newEnv(t, envOptions{})
	rng := rand.New(rand.NewPCG(17, 1))
	granted, seen := 0, 0
	const trials = 24
	for i := range trials {
		name := "hang" + strconv.Itoa(i)
		a := e.acquire(name, map[string]any{"ttl_ms": 60000, "owner": "A"})
		granted++
		ctx, hangUp := context.WithCancel(context.Background())
		id := "hang-c-" + strconv.Itoa(i)
		c := e.send(req{Method: "POST", Path: "/v1/locks/" + name, Context: ctx, Header: map[string]string{"X-Request-Id": id},
			Body: map[string]any{"fair": true, "wait_ms": 20000, "ttl_ms": 60000, "owner": "C"}})
		pollUntil(t, 10*time.Second, "C's ticket queued", func() bool { return e.queueLen(name) == 1 })
		var d *resp
		if i%2 == 1 { // a ticket behind C, kept alive by polling
			d = e.enqueue(name, map[string]any{"owner": "D", "ttl_ms": 60000})
		}
		hangUp()
		time.Sleep(time.Duration(rng.IntN(2500)) * time.Microsecond) // the race: release 0-2.5 ms after the hang-up
		wantStatus(t, e.do(req{Method: "DELETE", Path: a.Str("url")}), http.StatusOK, "")
		if got := <-c; got.err == nil {
			t.Fatalf("trial %d: C hung up but got an answer: %d %s", i, got.r.Status, got.r.Raw)
		}
		pollUntil(t, 10*time.Second, "trial "+strconv.Itoa(i)+": C's request logged", func() bool { return len(e.accessLines(id)) > 0 })
		if e.accessLines(id)[0]["status"] == 201.0 {
			// Answered before the server saw the hang-up: C holds the lock.
			granted++
			if !e.heldBy(name, "C") {
				t.Fatalf("trial %d: C was answered a grant, yet does not hold the lock", i)
			}
			wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/" + name + "?force=true"}), http.StatusOK, "")
		} else {
			seen++
		}
		if d != nil {
			got := e.poll(d.Str("url"), 10000)
			wantStatus(t, got, http.StatusOK, "") // D is granted, not stuck behind C's hold
			if got.Str("owner") != "D" {
				t.Fatalf("trial %d: D's poll answered a lease of %q", i, got.Str("owner"))
			}
			wantStatus(t, e.do(req{Method: "DELETE", Path: got.Str("url")}), http.StatusOK, "")
		}
		pollUntil(t, 10*time.Second, "trial "+strconv.Itoa(i)+": lock free, queue empty", func() bool {
			return !e.heldBy(name, "C") && !e.heldBy(name, "A") && e.queueLen(name) == 0
		})
		if e.heldBy(name, "C") {
			t.Fatalf("trial %d: the lock is held by C, whose client hung up", i)
		}
	}
	if seen < trials/2 {
		t.Errorf("the server saw C hang up before answering in %d trials of %d, want most", seen, trials)
	}
	if got := testutil.ToFloat64(e.Metrics.Acquires.WithLabelValues("granted")); int(got) != granted {
		t.Errorf("baton_acquires_total{outcome=granted} %v, want %d (A's, and C's answered before the hang-up was seen: the others were undone, D's came by poll)", got, granted)
	}
	t.Logf("abandoned: %v of %d", testutil.ToFloat64(e.Metrics.Acquires.WithLabelValues("abandoned")), trials)
}

// Redis freezes (SIGSTOP) longer than the store's read timeout while an acquire
// is sent: the client gets 503, and once Redis resumes, the grant the script made
// late (or would make) is undone, so the client's own retry is granted.
func TestSlowRedisLeavesNoHold(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, envOptions{Redis: srv})
	e.acquire("slowq", map[string]any{"ttl_ms": 60000, "owner": "holder"})

	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	plain := e.send(req{Method: "POST", Path: "/v1/locks/slow", Body: map[string]any{"ttl_ms": 600000, "owner": "slow"}})
	fair := e.send(req{Method: "POST", Path: "/v1/locks/slowq", Body: map[string]any{"fair": true, "ttl_ms": 600000, "owner": "slowq"}})
	for _, ch := range []<-chan answer{plain, fair} {
		got := awaitAnswer(t, ch, 15*time.Second)
		wantStatus(t, got.r, http.StatusServiceUnavailable, "store-unavailable")
	}
	srv.Thaw()
	thawed = true

	pollUntil(t, 5*time.Second, "the timed-out acquire undone", func() bool {
		st, err := e.try(req{Method: "GET", Path: "/v1/locks/slow"})
		return err == nil && st.Status == http.StatusOK && !st.Bool("held")
	})
	pollUntil(t, 5*time.Second, "the timed-out fair acquire's ticket undone", func() bool { return e.queueLen("slowq") == 0 })
	r := e.do(req{Method: "POST", Path: "/v1/locks/slow", Body: map[string]any{"ttl_ms": 1000, "owner": "slow"}})
	wantStatus(t, r, http.StatusCreated, "") // the client's own retry, not 423 behind its own orphan
}

// A watch returns when the lock changes hands by expiry: the lease runs out and
// someone takes the lock before any poke announced it free.
func TestWatchSeesChangeOfHandsByExpiry(t *testing.T) {
	e := reviewEnv(t, envOptions{}) // a Redis of its own: its script calls are the watch's
	e.awaitReady()                  // scripts loaded: one EVALSHA a call, no NOSCRIPT and EVAL
	// A's lease outlives setting the watch up; B's, and the watch's wait, are
	// far longer than promptly, so a watch that slept through B's hold fails.
	a := e.acquire("hands", map[string]any{"ttl_ms": 4000, "owner": "A"})
	end := parseStamp(t, a.Str("expires_at"))
	base := scriptCalls(t, e)
	watch := e.send(req{Method: "GET", Path: "/v1/locks/hands?wait_ms=30000"})
	e.awaitWaiters(1)
	e.awaitCalls(base + 2) // its first look, then its look once subscribed: it watches A's hold
	// The lease ends early, as by expiry (nothing published), and B takes the
	// lock at once, for 20 s: only the watch's own timer at A's lease end can see it.
	if err := e.Redis.Del(context.Background(), e.lockKey("hands")).Err(); err != nil {
		t.Fatal(err)
	}
	b := e.acquire("hands", map[string]any{"ttl_ms": 20000, "owner": "B"})
	got := awaitAnswer(t, watch, 40*time.Second)
	wantStatus(t, got.r, http.StatusOK, "")
	if got.r.Str("owner") != "B" || got.r.Int("fence") != b.Int("fence") {
		t.Fatalf("watch answered %s, want B's hold", got.r.Raw)
	}
	if late := got.at.Sub(end); late > promptly {
		t.Errorf("the watch returned %v after A's lease end, want at once (it slept through B's hold)", late)
	}

	// The same with a real expiry: B takes the lock as soon as A's lease runs out.
	a = e.acquire("hands2", map[string]any{"ttl_ms": 2000, "owner": "A"})
	base = scriptCalls(t, e)
	watch = e.send(req{Method: "GET", Path: "/v1/locks/hands2?wait_ms=30000"})
	e.awaitWaiters(1)
	e.awaitCalls(base + 2)
	var took *resp
	pollUntil(t, 10*time.Second, "B takes the lock", func() bool {
		r := e.do(req{Method: "POST", Path: "/v1/locks/hands2", Body: map[string]any{"ttl_ms": 20000, "owner": "B"}})
		if r.Status == http.StatusCreated {
			took = r
		}
		return took != nil
	})
	got = awaitAnswer(t, watch, 40*time.Second)
	if lag := got.at.Sub(parseStamp(t, took.Str("acquired_at"))); lag > promptly {
		t.Errorf("the watch returned %v after B took the lock, want at once", lag)
	}
}
