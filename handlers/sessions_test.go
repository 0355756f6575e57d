package handlers_test

import (
	"net/http"
	"testing"
	"time"
)

// Tests of sessions (API.md, "Sessions: many holds, one heartbeat"), with access
// control on: sessions belong to the key that made them.

// newSession creates a session and returns its answer.
func (e *env) newSession(body map[string]any, header map[string]string) *resp {
	e.t.Helper()
	r := e.do(req{Method: "POST", Path: "/v1/sessions", Body: body, Header: header})
	wantStatus(e.t, r, http.StatusCreated, "")
	if r.Header.Get("Location") != r.Str("url") {
		e.t.Fatalf("Location %q, url %q", r.Header.Get("Location"), r.Str("url"))
	}
	return r
}

func TestSessionLifecycle(t *testing.T) { onBoth(t, testSessionLifecycle) }

func testSessionLifecycle(t *testing.T, cluster bool) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file()})
	as := bearer(k.billing)
	s := e.newSession(map[string]any{"ttl_ms": 2000, "owner": "php-42"}, as)
	if s.Int("ttl_ms") < 1900 || s.Str("owner") != "php-42" || s.Int("locks") != 0 {
		t.Fatalf("session %s", s.Raw)
	}
	sid := s.Str("session")

	// Two locks in the session, one exclusive (re-entered), one shared.
	a := e.do(req{Method: "POST", Path: "/v1/locks/billing:a", Body: map[string]any{"session": sid}, Header: as})
	wantStatus(t, a, http.StatusCreated, "")
	if a.Int("ttl_ms") > 2000 || a.Int("ttl_ms") < 1500 {
		t.Errorf("a session's hold has ttl_ms %d, want the session's remaining time", a.Int("ttl_ms"))
	}
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:a", Body: map[string]any{"lease": a.Str("lease")}, Header: as}), http.StatusOK, "")
	b := e.do(req{Method: "POST", Path: "/v1/locks/billing:b", Body: map[string]any{"session": sid, "shared": true}, Header: as})
	wantStatus(t, b, http.StatusCreated, "")

	g := e.do(req{Method: "GET", Path: s.Str("url"), Header: as})
	wantStatus(t, g, http.StatusOK, "")
	holds, _ := g.Body["holds"].([]any)
	if g.Int("locks") != 2 || len(holds) != 2 {
		t.Fatalf("session %s: want two holds", g.Raw)
	}
	if h := holds[0].(map[string]any); h["url"] != a.Str("url") || h["shared"] != false {
		t.Errorf("holds[0] %v, want a's lease url %s", h, a.Str("url"))
	}
	if h := holds[1].(map[string]any); h["url"] != b.Str("url") || h["shared"] != true {
		t.Errorf("holds[1] %v, want b's lease url", h)
	}

	// Renewal extends every hold.
	r := e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: as})
	wantStatus(t, r, http.StatusOK, "")
	if r.Int("ttl_ms") < 59000 || r.Int("locks") != 2 {
		t.Errorf("renewed session %s", r.Raw)
	}
	for _, l := range []*resp{a, b} {
		got := e.do(req{Method: "GET", Path: l.Str("url"), Header: as})
		if got.Int("ttl_ms") < 59000 {
			t.Errorf("after the session's renewal, %s has ttl_ms %d, want about 60000", l.Str("name"), got.Int("ttl_ms"))
		}
	}

	// A waiter on each lock; deleting the session releases both holds completely
	// (a's count was 2) and hands each lock to its queue at once.
	wa := e.send(req{Method: "POST", Path: "/v1/locks/billing:a", Body: map[string]any{"wait_ms": 10000}, Header: as})
	wb := e.send(req{Method: "POST", Path: "/v1/locks/billing:b", Body: map[string]any{"wait_ms": 10000}, Header: as})
	e.awaitWaiters(2)
	d := e.do(req{Method: "DELETE", Path: s.Str("url"), Header: as})
	wantStatus(t, d, http.StatusOK, "")
	if d.Int("released") != 2 || d.Str("session") != sid {
		t.Errorf("delete %s: want released 2", d.Raw)
	}
	for _, w := range []<-chan answer{wa, wb} {
		wantStatus(t, awaitAnswer(t, w, 2*time.Second).r, http.StatusCreated, "")
	}
	wantStatus(t, e.do(req{Method: "GET", Path: s.Str("url"), Header: as}), http.StatusNotFound, "session-not-found")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:c", Body: map[string]any{"session": sid}, Header: as}),
		http.StatusNotFound, "session-not-found")
}

// An expired session takes its holds with it, and leaves nothing but fences.
func TestSessionExpires(t *testing.T) { onBoth(t, testSessionExpires) }

func testSessionExpires(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	s := e.newSession(map[string]any{"ttl_ms": 400}, nil)
	sid := s.Str("session")
	for _, n := range []string{"e1", "e2"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + n, Body: map[string]any{"session": sid}}), http.StatusCreated, "")
	}
	tk := e.acquire("e3", map[string]any{"ttl_ms": 30000})
	q := e.do(req{Method: "POST", Path: "/v1/locks/e3", Body: map[string]any{"session": sid, "fair": true}})
	wantStatus(t, q, http.StatusAccepted, "")
	e.awaitFree("e1")
	e.awaitFree("e2")
	wantStatus(t, e.do(req{Method: "GET", Path: s.Str("url")}), http.StatusNotFound, "session-not-found")
	// The session's ticket is not granted after the session ended.
	e.release(tk)
	if st := e.state("e3"); st.Bool("held") {
		t.Errorf("a ticket of an expired session was granted: %s", st.Raw)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := 0
		for _, k := range e.keys() {
			if !e.fenceOnly(k) {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys left after the session expired: %v", e.keys())
		}
		time.Sleep(100 * time.Millisecond) // expiry is the event
	}
}

// Sessions belong to their key; bad input is refused; a fair ticket's grant
// joins its session; a session works across gateways.
func TestSessionRules(t *testing.T) { onBoth(t, testSessionRules) }

func testSessionRules(t *testing.T, cluster bool) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file()})
	e2 := newEnv(t, envOptions{Cluster: cluster, Keys: k.file(), Prefix: e.Prefix, Redis: e.Server})
	as := bearer(k.billing)
	s := e.newSession(map[string]any{"ttl_ms": 30000}, as)
	sid := s.Str("session")
	for _, rq := range []req{
		{Method: "GET", Path: s.Str("url")},
		{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{}},
		{Method: "DELETE", Path: s.Str("url")},
	} {
		rq.Header = bearer(k.ops) // another key, an admin at that: the answer for an unknown session
		wantStatus(t, e.do(rq), http.StatusNotFound, "session-not-found")
	}
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:x", Body: map[string]any{"session": sid, "ttl_ms": 1000}, Header: as}),
		http.StatusBadRequest, "invalid-request")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:x", Body: map[string]any{"session": "nosuchsessionid0000000"}, Header: as}),
		http.StatusNotFound, "session-not-found")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 1}, Header: as}),
		http.StatusBadRequest, "invalid-request")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"owner": "a\nb"}, Header: as}),
		http.StatusBadRequest, "invalid-request")

	// A fair ticket carries the session; its grant joins it.
	h := e.do(req{Method: "POST", Path: "/v1/locks/billing:q", Body: map[string]any{}, Header: as})
	q := e.do(req{Method: "POST", Path: "/v1/locks/billing:q", Body: map[string]any{"fair": true, "session": sid}, Header: as})
	wantStatus(t, q, http.StatusAccepted, "")
	e.do(req{Method: "DELETE", Path: h.Str("url"), Header: as})
	got := e.do(req{Method: "GET", Path: q.Str("url") + "?wait_ms=2000", Header: as})
	wantStatus(t, got, http.StatusOK, "")

	// Renewed from gateway A, deleted on gateway B.
	r := e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{"ttl_ms": 45000}, Header: as})
	wantStatus(t, r, http.StatusOK, "")
	if r.Int("locks") != 1 {
		t.Errorf("renewed session %s: want the ticket's grant in it", r.Raw)
	}
	if l := e.do(req{Method: "GET", Path: got.Str("url"), Header: as}); l.Int("ttl_ms") < 44000 {
		t.Errorf("the ticket's grant after the session's renewal: ttl_ms %d, want about 45000", l.Int("ttl_ms"))
	}
	d := e2.do(req{Method: "DELETE", Path: s.Str("url"), Header: as})
	wantStatus(t, d, http.StatusOK, "")
	if d.Int("released") != 1 {
		t.Errorf("delete on the other gateway: %s", d.Raw)
	}
	if st := e.do(req{Method: "GET", Path: "/v1/locks/billing:q", Header: as}); st.Bool("held") {
		t.Errorf("held after its session was deleted: %s", st.Raw)
	}
	// A hold released alone leaves the session.
	s2 := e.newSession(nil, as)
	l := e.do(req{Method: "POST", Path: "/v1/locks/billing:y", Body: map[string]any{"session": s2.Str("session")}, Header: as})
	e.do(req{Method: "DELETE", Path: l.Str("url"), Header: as})
	if g := e.do(req{Method: "GET", Path: s2.Str("url"), Header: as}); g.Int("locks") != 0 {
		t.Errorf("session %s: want no holds after its only hold was released", g.Raw)
	}
}

// A session ended with DELETE is gone for a second DELETE, also when it was
// made with an Idempotency-Key (its key then stays for the grace, for a retry of
// the POST to be told it ended).
func TestSessionEndTwice(t *testing.T) { onBoth(t, testSessionEndTwice) }

func testSessionEndTwice(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	for _, header := range []map[string]string{nil, {"Idempotency-Key": "end-twice"}} {
		s := e.newSession(map[string]any{"ttl_ms": 30000}, header)
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/et", Body: map[string]any{"session": s.Str("session")}}), http.StatusCreated, "")
		end := e.do(req{Method: "DELETE", Path: s.Str("url")})
		wantStatus(t, end, http.StatusOK, "")
		if end.Int("released") != 1 {
			t.Errorf("first DELETE released %d holds, want 1", end.Int("released"))
		}
		wantStatus(t, e.do(req{Method: "DELETE", Path: s.Str("url")}), http.StatusNotFound, "session-not-found")
		wantStatus(t, e.do(req{Method: "GET", Path: s.Str("url")}), http.StatusNotFound, "session-not-found")
		if header != nil {
			again := e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 30000}, Header: header})
			wantStatus(t, again, http.StatusConflict, "")
		}
	}
}
