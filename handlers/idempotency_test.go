package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// Tests of Idempotency-Key (API.md, "Idempotency-Key"), with access control on:
// records are per key (principal).

func withKey(idem string, h map[string]string) map[string]string {
	out := map[string]string{"Idempotency-Key": idem}
	for k, v := range h {
		out[k] = v
	}
	return out
}

func TestIdempotentAcquire(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file(), IdempotencyGrace: time.Second})
	as := bearer(k.billing)
	body := map[string]any{"ttl_ms": 30000, "owner": "w"}
	first := e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: body, Header: withKey("k-1", as)})
	wantStatus(t, first, http.StatusCreated, "")
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Error("the first answer is marked replayed")
	}
	again := e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: body, Header: withKey("k-1", as)})
	wantStatus(t, again, http.StatusCreated, "")
	if again.Str("lease") != first.Str("lease") || again.Int("fence") != first.Int("fence") || again.Int("count") != 1 ||
		again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry %s (replayed %q), want the first lease, fence and count 1, replayed", again.Raw, again.Header.Get("Idempotent-Replayed"))
	}
	// Quoted (sf-string) is the same key.
	q := e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: body, Header: withKey(`"k-1"`, as)})
	if q.Str("lease") != first.Str("lease") {
		t.Errorf("quoted key: %s", q.Raw)
	}
	// Another body: 422; another lock (path) or another key (principal): a fresh request.
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: map[string]any{"ttl_ms": 1000}, Header: withKey("k-1", as)}),
		http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	other := e.do(req{Method: "POST", Path: "/v1/locks/billing:j", Body: body, Header: withKey("k-1", as)})
	wantStatus(t, other, http.StatusCreated, "")
	if other.Header.Get("Idempotent-Replayed") != "" {
		t.Error("the same key on another lock was replayed")
	}
	// What it made ends: 409 for the grace, then a fresh request.
	wantStatus(t, e.do(req{Method: "DELETE", Path: first.Str("url"), Header: as}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: body, Header: withKey("k-1", as)}),
		http.StatusConflict, "idempotency-key-used")
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := e.do(req{Method: "POST", Path: "/v1/locks/billing:i", Body: body, Header: withKey("k-1", as)})
		if r.Status == http.StatusCreated {
			break
		}
		wantStatus(t, r, http.StatusConflict, "idempotency-key-used")
		if time.Now().After(deadline) {
			t.Fatal("the key was still remembered 5 s after a 1 s grace")
		}
		time.Sleep(50 * time.Millisecond) // the grace passing is the event
	}

	// Bad keys are a 400.
	for _, bad := range []string{"has space", strings.Repeat("a", 256), "é", `a"b`, `""`} {
		r := e.do(req{Method: "POST", Path: "/v1/locks/billing:z", Body: body, Header: withKey(bad, as)})
		wantStatus(t, r, http.StatusBadRequest, "invalid-request")
	}
}

// A request that made nothing (423) is not remembered; a ticket is replayed,
// then the lease it became.
func TestIdempotentTicketAndRefusal(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.acquire("t", map[string]any{"ttl_ms": 30000})
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/t", Body: map[string]any{}, Header: withKey("n-1", nil)}), http.StatusLocked, "lock-held")
	tk := e.do(req{Method: "POST", Path: "/v1/locks/t", Body: map[string]any{"fair": true}, Header: withKey("f-1", nil)})
	wantStatus(t, tk, http.StatusAccepted, "")
	re := e.do(req{Method: "POST", Path: "/v1/locks/t", Body: map[string]any{"fair": true}, Header: withKey("f-1", nil)})
	wantStatus(t, re, http.StatusAccepted, "")
	if re.Str("ticket") != tk.Str("ticket") || re.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry of a queued request: %s, want the same ticket, replayed", re.Raw)
	}
	e.release(h)
	l := e.poll(tk.Str("url"), 2000)
	wantStatus(t, l, http.StatusOK, "")
	re = e.do(req{Method: "POST", Path: "/v1/locks/t", Body: map[string]any{"fair": true}, Header: withKey("f-1", nil)})
	wantStatus(t, re, http.StatusCreated, "")
	if re.Str("lease") != l.Str("lease") || re.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the ticket was granted: %s, want its lease", re.Raw)
	}
	e.release(l)
	// The 423 made nothing: its retry is a fresh attempt, granted now.
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/t", Body: map[string]any{}, Header: withKey("n-1", nil)}), http.StatusCreated, "")
}

// Concurrent duplicates make one hold; every answer but the one that made it
// is marked replayed.
func TestIdempotentConcurrentDuplicates(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n = 50
	var wg sync.WaitGroup
	answers := make([]*resp, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.try(req{Method: "POST", Path: "/v1/locks/dup", Body: map[string]any{"ttl_ms": 30000}, Header: withKey("dup-1", nil)})
			if err != nil {
				t.Error(err)
				return
			}
			answers[i] = r
		}()
	}
	wg.Wait()
	fresh := 0
	for _, r := range answers {
		if r == nil {
			continue
		}
		wantStatus(t, r, http.StatusCreated, "")
		if r.Str("lease") != answers[0].Str("lease") {
			t.Fatalf("two leases for one key: %s and %s", r.Str("lease"), answers[0].Str("lease"))
		}
		if r.Header.Get("Idempotent-Replayed") == "" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d answers not marked replayed, want exactly 1", fresh)
	}
	if st := e.state("dup"); st.Int("count") != 1 || st.Int("holders") != 1 {
		t.Errorf("state %s: want one hold of count 1", st.Raw)
	}
}

// The answer to a POST is lost (the connection cut after the script ran): the
// client's retry with the same key gets the hold it made, and there is one.
func TestIdempotentRetryAfterLostAnswer(t *testing.T) {
	srv := redistest.Start(t)
	px := startProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL()})
	body := map[string]any{"ttl_ms": 30000, "owner": "retrier"}
	px.cutNextScript.Store(true)
	lost := e.do(req{Method: "POST", Path: "/v1/locks/lost", Body: body, Header: withKey("lost-1", nil)})
	<-px.cuts
	t.Logf("answer when the connection was cut: %d", lost.Status)
	// The store's own retry may already have answered; either way, a retry
	// with the key ends with one hold the client knows.
	r := e.do(req{Method: "POST", Path: "/v1/locks/lost", Body: body, Header: withKey("lost-1", nil)})
	wantStatus(t, r, http.StatusCreated, "")
	if lost.Status == http.StatusCreated && r.Str("lease") != lost.Str("lease") {
		t.Errorf("two leases: %s then %s", lost.Str("lease"), r.Str("lease"))
	}
	st := e.state("lost")
	if st.Int("holders") != 1 || st.Int("count") != 1 || st.Int("fence") != r.Int("fence") {
		t.Errorf("state %s: want one hold, the retry's", st.Raw)
	}
}

// A session POST with a key is replayed too.
func TestIdempotentSession(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 5000}, Header: withKey("s-1", nil)})
	wantStatus(t, a, http.StatusCreated, "")
	b := e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 5000}, Header: withKey("s-1", nil)})
	wantStatus(t, b, http.StatusCreated, "")
	if a.Str("session") != b.Str("session") || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry %s, want the same session, replayed", b.Raw)
	}
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 6000}, Header: withKey("s-1", nil)}),
		http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantStatus(t, e.do(req{Method: "DELETE", Path: a.Str("url")}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 5000}, Header: withKey("s-1", nil)}),
		http.StatusConflict, "idempotency-key-used")
}

// A client sends a key on every POST: the records follow the live holds, not
// the number of POSTs.
func TestIdempotencyRecordsFollowHolds(t *testing.T) {
	e := newEnv(t, envOptions{IdempotencyGrace: time.Second})
	for i := range 200 {
		l := e.do(req{Method: "POST", Path: "/v1/locks/rec", Body: map[string]any{"ttl_ms": 30000}, Header: withKey("r-"+strconv.Itoa(i), nil)})
		wantStatus(t, l, http.StatusCreated, "")
		e.release(l)
	}
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := len(e.Redis.Keys(ctx, e.lockKey("rec")+":i:*").Val())
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idempotency records left 5 s after the last hold ended, with a 1 s grace", n)
		}
		time.Sleep(100 * time.Millisecond) // the grace passing is the event
	}
}
