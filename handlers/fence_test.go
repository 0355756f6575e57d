package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests of re-entry, renewal, force release and fences: a fence grows with every
// new grant on a name, however the last holder let go and whatever happened to the
// lock's keys, and stays where it is on re-entry.

// maxFence is 2^53: fences must stay exact in every client's JSON numbers.
const maxFence = int64(1) << 53

// awaitFree waits (with a lock-state watch) until the lock is no longer held.
func (e *env) awaitFree(name string) {
	e.t.Helper()
	st := e.do(req{Method: "GET", Path: "/v1/locks/" + name + "?wait_ms=10000"})
	wantStatus(e.t, st, http.StatusOK, "")
	if st.Bool("held") {
		e.t.Fatalf("lock %s still held after the watch: %s", name, st.Raw)
	}
}

func TestReentry(t *testing.T) {
	e := newEnv(t, envOptions{})
	l := e.acquire("re", map[string]any{"ttl_ms": 5000, "owner": "w"})

	r := e.do(req{Method: "POST", Path: "/v1/locks/re", Body: map[string]any{"lease": l.Str("lease"), "ttl_ms": 60000}})
	wantStatus(t, r, http.StatusOK, "")
	if r.Int("count") != 2 || r.Int("fence") != l.Int("fence") || r.Str("lease") != l.Str("lease") || r.Str("url") != l.Str("url") {
		t.Fatalf("re-entry %s\nafter grant %s\nwant count 2, same fence, lease and url", r.Raw, l.Raw)
	}
	if r.Int("ttl_ms") < 55000 {
		t.Errorf("re-entry ttl_ms %d, want renewed to about 60000", r.Int("ttl_ms"))
	}
	if pttl := e.Redis.PTTL(context.Background(), e.lockKey("re")).Val(); pttl < 55*time.Second {
		t.Errorf("Redis PTTL %v after re-entry, want about 60s", pttl)
	}

	for _, want := range []struct {
		count    int64
		released bool
	}{{count: 1, released: false}, {count: 0, released: true}} {
		d := e.do(req{Method: "DELETE", Path: l.Str("url")})
		wantStatus(t, d, http.StatusOK, "")
		if d.Int("count") != want.count || d.Bool("released") != want.released {
			t.Fatalf("release %s, want count %d released %v", d.Raw, want.count, want.released)
		}
		st := e.do(req{Method: "GET", Path: "/v1/locks/re"})
		if st.Bool("held") != !want.released || st.Int("count") != want.count {
			t.Fatalf("state after release %s, want held %v count %d", st.Raw, !want.released, want.count)
		}
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: l.Str("url")}), http.StatusNotFound, "lease-not-held")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/re", Body: map[string]any{"lease": l.Str("lease")}}), http.StatusNotFound, "lease-not-held")
}

// Once a lease has run out nothing brings it back: not a renewal, not a re-entry.
func TestExpiredLeaseStaysExpired(t *testing.T) {
	tests := []struct {
		give string
		req  func(l *resp) req
	}{
		{give: "renew", req: func(l *resp) req {
			return req{Method: "PATCH", Path: l.Str("url"), Body: map[string]any{"ttl_ms": 30000}}
		}},
		{give: "renew with its own ttl", req: func(l *resp) req { return req{Method: "PATCH", Path: l.Str("url")} }},
		{give: "re-enter", req: func(l *resp) req {
			return req{Method: "POST", Path: "/v1/locks/" + l.Str("name"), Body: map[string]any{"lease": l.Str("lease"), "ttl_ms": 30000}}
		}},
		{give: "get", req: func(l *resp) req { return req{Method: "GET", Path: l.Str("url")} }},
		{give: "release", req: func(l *resp) req { return req{Method: "DELETE", Path: l.Str("url")} }},
	}
	e := newEnv(t, envOptions{})
	for i, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			name := "ex-" + itoa(i)
			l := e.acquire(name, map[string]any{"ttl_ms": 100})
			e.awaitFree(name)
			wantStatus(t, e.do(tt.req(l)), http.StatusNotFound, "lease-not-held")
			if st := e.state(name); st.Bool("held") {
				t.Fatalf("lock held after %s on an expired lease: %s", tt.give, st.Raw)
			}
			wantStatus(t, e.do(req{Method: "GET", Path: l.Str("url")}), http.StatusNotFound, "lease-not-held")
		})
	}
}

func TestForceRelease(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.do(req{Method: "DELETE", Path: "/v1/locks/never-held?force=true"})
	wantStatus(t, r, http.StatusOK, "")
	if r.Bool("released") || r.Str("name") != "never-held" {
		t.Fatalf("force on a free lock %s, want released false", r.Raw)
	}

	h := e.acquire("forced", map[string]any{"ttl_ms": 30000})
	w := e.parkWaiter("forced", map[string]any{"wait_ms": 15000})
	sent := time.Now()
	r = e.do(req{Method: "DELETE", Path: "/v1/locks/forced?force=true"})
	wantStatus(t, r, http.StatusOK, "")
	if !r.Bool("released") {
		t.Fatalf("force %s, want released true", r.Raw)
	}
	got := awaitAnswer(t, w, 20*time.Second)
	wantStatus(t, got.r, http.StatusCreated, "")
	t.Logf("force -> waiter's grant: %s", fmtMs(got.at.Sub(sent)))
	if took := got.at.Sub(sent); took > promptly {
		t.Errorf("waiter granted %v after the force, want it at the force (< %v)", took, promptly)
	}
	if got.r.Int("fence") <= h.Int("fence") {
		t.Errorf("waiter's fence %d, want > forced holder's %d", got.r.Int("fence"), h.Int("fence"))
	}
	// The forced holder's lease is gone for every operation.
	for _, rq := range []req{
		{Method: "GET", Path: h.Str("url")},
		{Method: "PATCH", Path: h.Str("url"), Body: map[string]any{"ttl_ms": 30000}},
		{Method: "POST", Path: "/v1/locks/forced", Body: map[string]any{"lease": h.Str("lease")}},
		{Method: "DELETE", Path: h.Str("url")},
	} {
		wantStatus(t, e.do(rq), http.StatusNotFound, "lease-not-held")
	}
	wantStatus(t, e.do(req{Method: "GET", Path: got.r.Str("url")}), http.StatusOK, "")
}

// Fences strictly increase over every new grant on one name, whichever way the
// previous holder let go, even when the fence key or all of the lock's keys are
// lost; a re-entry keeps its fence.
func TestFencesOnlyGrow(t *testing.T) {
	e := newEnv(t, envOptions{})
	const name = "fenced"
	ctx := context.Background()
	lock := e.lockKey(name)
	delFence := func() {
		t.Helper()
		lv, _ := readLock(e.Redis, lock)
		lv.parts[0] = ""
		if err := e.Redis.Set(ctx, lock, strings.Join(lv.parts, "|"), redis.KeepTTL).Err(); err != nil {
			t.Fatal(err)
		}
		// The fence is gone only a guard after the last grant; here, at least let the
		// Redis clock leave the millisecond of that grant, which the floor needs.
		time.Sleep(2 * time.Millisecond)
	}
	del := func(keys ...string) {
		t.Helper()
		if err := e.Redis.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
		// The key is gone only a guard after the last grant; here, at least let the
		// Redis clock leave the millisecond of that grant, which the floor needs.
		time.Sleep(2 * time.Millisecond)
	}
	release := func(l *resp) {
		t.Helper()
		wantStatus(t, e.do(req{Method: "DELETE", Path: l.Str("url")}), http.StatusOK, "")
	}

	var fences []int64
	record := func(how string, f int64) {
		t.Helper()
		if f <= 0 || f >= maxFence {
			t.Fatalf("%s: fence %d, want 0 < fence < 2^53", how, f)
		}
		if n := len(fences); n > 0 && f <= fences[n-1] {
			t.Fatalf("%s: fence %d, want > the previous %d (all so far %v)", how, f, fences[n-1], fences)
		}
		fences = append(fences, f)
	}

	// Each step lets go of a lock granted with ttl_ms; some grant it on, to a
	// waiter or a ticket, and record that fence too.
	steps := []struct {
		give  string
		ttlMs int
		letGo func(l *resp)
	}{
		{give: "released", ttlMs: 30000, letGo: release},
		{give: "re-entered, released twice", ttlMs: 30000, letGo: func(l *resp) {
			r := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{"lease": l.Str("lease")}})
			wantStatus(t, r, http.StatusOK, "")
			if r.Int("fence") != l.Int("fence") {
				t.Fatalf("re-entry fence %d, want the holder's %d", r.Int("fence"), l.Int("fence"))
			}
			release(l)
			release(l)
		}},
		{give: "expired", ttlMs: 100, letGo: func(*resp) { e.awaitFree(name) }},
		{give: "forced", ttlMs: 30000, letGo: func(*resp) {
			wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/" + name + "?force=true"}), http.StatusOK, "")
		}},
		{give: "handed to a waiter", ttlMs: 30000, letGo: func(l *resp) {
			w := e.parkWaiter(name, map[string]any{"wait_ms": 10000})
			release(l)
			got := awaitAnswer(t, w, 5*time.Second).r
			wantStatus(t, got, http.StatusCreated, "")
			record("waiter after release", got.Int("fence"))
			release(got)
		}},
		{give: "handed to a ticket", ttlMs: 30000, letGo: func(l *resp) {
			tk := e.enqueue(name, nil)
			release(l)
			got := e.poll(tk.Str("url"), 0)
			wantStatus(t, got, http.StatusOK, "")
			record("ticket after release", got.Int("fence"))
			release(got)
		}},
		{give: "released, fence deleted", ttlMs: 30000, letGo: func(l *resp) {
			release(l)
			delFence()
		}},
		{give: "fence deleted, then expired", ttlMs: 100, letGo: func(*resp) {
			delFence()
			e.awaitFree(name)
		}},
		{give: "every key of the lock deleted while held", ttlMs: 30000, letGo: func(*resp) {
			keys, err := allKeys(ctx, e.Redis, lock+"*")
			if err != nil || len(keys) < 1 {
				t.Fatalf("keys of %s: %v %v, want the lock's key", name, keys, err)
			}
			del(keys...)
		}},
		{give: "last", ttlMs: 30000, letGo: release},
	}
	for _, st := range steps {
		l := e.acquire(name, map[string]any{"ttl_ms": st.ttlMs})
		record("granted before "+st.give, l.Int("fence"))
		st.letGo(l)
	}
	t.Logf("fences: %v", fences)

	// The lock's state shows the last fence issued while it is free.
	st := e.do(req{Method: "GET", Path: "/v1/locks/" + name})
	if st.Bool("held") || st.Int("fence") != fences[len(fences)-1] {
		t.Errorf("state %s, want free with the last fence %d", st.Raw, fences[len(fences)-1])
	}
}
