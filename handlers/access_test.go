package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/auth"
)

// Tests of access control (API.md, "Access control"): keys with grants over lock
// names, 401/403/429, holds and tickets bound to the key that made them, reload,
// audit, and keys never leaving the request that carried them.

// testKeys are API keys for the tests, made fresh per process.
type testKeys struct {
	billing, ops, reader, slow, narrow string
}

func newTestKeys() testKeys {
	return testKeys{billing: auth.NewKey(), ops: auth.NewKey(), reader: auth.NewKey(), slow: auth.NewKey(), narrow: auth.NewKey()}
}

// file is the keys file for k.
func (k testKeys) file() string {
	return fmt.Sprintf(`keys:
  - name: billing-web
    sha256: %s
    allow:
      - names: "billing:*"
        actions: [lock, read]
  - name: ops
    sha256: %s
    allow:
      - names: "*"
        actions: [admin, metrics]
  - name: dashboard
    sha256: %s
    allow:
      - names: "*"
        actions: [read]
  - name: slow
    sha256: %s
    rate_per_s: 2
    allow:
      - names: "slow:*"
        actions: [lock, read]
  - name: narrow
    sha256: %s
    max_waiters: 1
    allow:
      - names: "narrow:?"
        actions: [lock, read]
`, auth.KeySHA256(k.billing), auth.KeySHA256(k.ops), auth.KeySHA256(k.reader), auth.KeySHA256(k.slow), auth.KeySHA256(k.narrow))
}

func bearer(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }

func TestAuthRequired(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	huge := "Bearer " + strings.Repeat("k", 10<<10)
	for _, h := range []string{"", "bk_nokeylikethisoneeeeeeeeeeeeeeeeeeeeeeeeeeeee", "Basic dXNlcjpwYXNz", "Bearer", "Bearer ",
		huge, "Bearer " + k.billing + "x", "bearer" + k.billing, "Bearer kéy-with-non-ascii-characters-in-it-000000"} {
		before := e.snapshot()
		hdr := map[string]string{"Authorization": h}
		if h == "" {
			hdr = nil
		}
		r := e.do(req{Method: "POST", Path: "/v1/locks/billing:a", Body: map[string]any{}, Header: hdr})
		wantStatus(t, r, http.StatusUnauthorized, "unauthorized")
		if got := r.Header.Get("WWW-Authenticate"); got != `Bearer realm="baton"` {
			t.Errorf("Authorization %.30q: WWW-Authenticate %q", h, got)
		}
		e.unchanged("unauthenticated request", before, e.snapshot())
	}
	// The same answer whether or not the key exists: nothing tells them apart.
	a := e.do(req{Method: "GET", Path: "/v1/locks/billing:a", Header: bearer(auth.NewKey())})
	b := e.do(req{Method: "GET", Path: "/v1/locks/billing:a", Header: map[string]string{"Authorization": "Bearer short"}})
	if a.Str("detail") == "" || a.Status != b.Status {
		t.Errorf("unknown key %s vs malformed %s", a.Raw, b.Raw)
	}
	// Open routes need no key.
	for _, p := range []string{"/livez", "/readyz", "/openapi.yaml"} {
		if r := e.do(req{Method: "GET", Path: p}); r.Status != http.StatusOK {
			t.Errorf("GET %s without a key: %d", p, r.Status)
		}
	}
	wantStatus(t, e.do(req{Method: "GET", Path: "/metrics"}), http.StatusUnauthorized, "unauthorized")
}

func TestAuthGrants(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	as := func(key string, r req) *resp {
		t.Helper()
		r.Header = bearer(key)
		return e.do(r)
	}
	l := as(k.billing, req{Method: "POST", Path: "/v1/locks/billing:inv", Body: map[string]any{"owner": "b"}})
	wantStatus(t, l, http.StatusCreated, "")

	// Outside its grants: 403 naming the action and the lock, nothing done.
	r := as(k.billing, req{Method: "POST", Path: "/v1/locks/payroll", Body: map[string]any{}})
	wantStatus(t, r, http.StatusForbidden, "forbidden")
	if d := r.Str("detail"); !strings.Contains(d, "lock") || !strings.Contains(d, "payroll") || !strings.Contains(d, "billing-web") {
		t.Errorf("403 detail %q: want the key, the action and the lock named", d)
	}
	wantStatus(t, as(k.billing, req{Method: "DELETE", Path: "/v1/locks/billing:inv?force=true"}), http.StatusForbidden, "forbidden")
	wantStatus(t, as(k.billing, req{Method: "GET", Path: "/metrics"}), http.StatusForbidden, "forbidden")
	wantStatus(t, as(k.reader, req{Method: "POST", Path: "/v1/locks/billing:x", Body: map[string]any{}}), http.StatusForbidden, "forbidden")
	wantStatus(t, as(k.reader, req{Method: "GET", Path: "/v1/locks/billing:inv"}), http.StatusOK, "")

	// Leases and tickets belong to the key that made them: the admin gets the
	// answer for an unknown one, and ends other people's holds only with force.
	for _, rq := range []req{
		{Method: "GET", Path: l.Str("url")},
		{Method: "PATCH", Path: l.Str("url"), Body: map[string]any{"ttl_ms": 60000}},
		{Method: "DELETE", Path: l.Str("url")},
		{Method: "POST", Path: "/v1/locks/billing:inv", Body: map[string]any{"lease": l.Str("lease")}},
	} {
		wantStatus(t, as(k.ops, rq), http.StatusNotFound, "lease-not-held")
	}
	tk := as(k.billing, req{Method: "POST", Path: "/v1/locks/billing:inv", Body: map[string]any{"fair": true}})
	wantStatus(t, tk, http.StatusAccepted, "")
	wantStatus(t, as(k.ops, req{Method: "GET", Path: tk.Str("url")}), http.StatusGone, "ticket-gone")
	wantStatus(t, as(k.ops, req{Method: "DELETE", Path: tk.Str("url")}), http.StatusGone, "ticket-gone")
	wantStatus(t, as(k.billing, req{Method: "GET", Path: tk.Str("url")}), http.StatusAccepted, "") // still queued
	wantStatus(t, as(k.billing, req{Method: "GET", Path: l.Str("url")}), http.StatusOK, "")        // still held
	f := as(k.ops, req{Method: "DELETE", Path: "/v1/locks/billing:inv?force=true"})
	wantStatus(t, f, http.StatusOK, "")
	if !f.Bool("released") {
		t.Errorf("force %s", f.Raw)
	}
	wantStatus(t, as(k.billing, req{Method: "GET", Path: tk.Str("url")}), http.StatusOK, "") // handed to the queue
	m := as(k.ops, req{Method: "GET", Path: "/metrics"})
	wantStatus(t, m, http.StatusOK, "")
	if !strings.Contains(string(m.Raw), `principal="billing-web"`) {
		t.Errorf("/metrics lacks the principal label")
	}

	// Audit: every 401, 403 and force release, with principal, route, peer, request id.
	as(auth.NewKey(), req{Method: "GET", Path: "/v1/locks/billing:inv"})
	logs := e.Logs.String()
	for _, want := range []string{`"event":"unauthorized","principal":"anonymous"`, `"event":"forbidden","principal":"billing-web"`,
		`"event":"force","principal":"ops","route":"/v1/locks/{name}"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks an audit line with %s", want)
		}
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"audit":true`) && (!strings.Contains(line, `"peer":"127.0.0.1:`) || !strings.Contains(line, `"request_id":"`)) {
			t.Errorf("audit line without peer or request id: %s", line)
		}
	}
}

// A key over its rate is refused with 429 and Retry-After; another key is not.
func TestAuthRateLimit(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	limited := 0
	var r429 *resp
	for range 12 {
		r := e.do(req{Method: "GET", Path: "/v1/locks/slow:x", Header: bearer(k.slow)})
		if r.Status == http.StatusTooManyRequests {
			limited++
			r429 = r
		}
	}
	if limited == 0 {
		t.Fatal("12 requests at once of a key with rate_per_s 2 were all served")
	}
	wantStatus(t, r429, http.StatusTooManyRequests, "rate-limited")
	if r429.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	for range 12 {
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:x", Header: bearer(k.billing)}), http.StatusOK, "")
	}
}

// A key's long-polls are bounded by its max_waiters.
func TestAuthMaxWaiters(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	h := e.do(req{Method: "POST", Path: "/v1/locks/narrow:a", Body: map[string]any{}, Header: bearer(k.narrow)})
	wantStatus(t, h, http.StatusCreated, "")
	w := e.send(req{Method: "GET", Path: "/v1/locks/narrow:a?wait_ms=5000", Header: bearer(k.narrow)})
	e.awaitWaiters(1)
	r := e.do(req{Method: "POST", Path: "/v1/locks/narrow:a", Body: map[string]any{"wait_ms": 1000}, Header: bearer(k.narrow)})
	wantStatus(t, r, http.StatusTooManyRequests, "too-many-waiters")
	e.do(req{Method: "DELETE", Path: h.Str("url"), Header: bearer(k.narrow)})
	wantStatus(t, awaitAnswer(t, w, 5*time.Second).r, http.StatusOK, "")
}

// Protected mode (no keys file): loopback peers may do everything; any other
// peer gets 401 with a detail that says how to configure keys.
func TestProtectedMode(t *testing.T) {
	e := newEnv(t, envOptions{Protected: true})
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/p", Body: map[string]any{}}), http.StatusCreated, "")
	for _, path := range []string{"/v1/locks/p", "/metrics", "/readyz"} {
		rq := httptest.NewRequest(http.MethodGet, path, nil)
		rq.RemoteAddr = "192.0.2.7:40000"
		rq.Header.Set("X-Forwarded-For", "127.0.0.1") // never trusted
		w := httptest.NewRecorder()
		e.Handler.ServeHTTP(w, rq)
		switch {
		case path == "/readyz" && w.Code != http.StatusOK:
			t.Errorf("GET /readyz from another host: %d, want 200 (open)", w.Code)
		case path != "/readyz" && w.Code != http.StatusUnauthorized:
			t.Errorf("GET %s from another host: %d, want 401", path, w.Code)
		case path != "/readyz" && !strings.Contains(w.Body.String(), "BATON_AUTH_FILE"):
			t.Errorf("401 body %s: want it to say how to configure keys", w.Body.String())
		}
	}
}

// Reload adds and removes keys without dropping the long-polls in flight; a bad
// file adds nothing, still revokes the keys gone from it, and is counted.
func TestAuthReload(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	hold := e.do(req{Method: "POST", Path: "/v1/locks/billing:r", Body: map[string]any{}, Header: bearer(k.billing)})
	wantStatus(t, hold, http.StatusCreated, "")
	w := e.send(req{Method: "GET", Path: "/v1/locks/billing:r?wait_ms=3000", Header: bearer(k.billing)})
	e.awaitWaiters(1)

	newKey := auth.NewKey()
	file := strings.Replace(k.file(), "  - name: billing-web\n    sha256: "+auth.KeySHA256(k.billing),
		"  - name: newcomer\n    sha256: "+auth.KeySHA256(newKey), 1)
	if err := os.WriteFile(e.KeysFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Guard.Reload(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:r", Header: bearer(k.billing)}), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:r", Header: bearer(newKey)}), http.StatusOK, "")
	got := awaitAnswer(t, w, 6*time.Second) // the removed key's long-poll ends normally
	wantStatus(t, got.r, http.StatusOK, "")

	// An edit that removes the newcomer and, by mistake, breaks the file: the
	// reload fails and is counted, yet the newcomer is revoked (fail closed),
	// while ops, still in the file, keeps working.
	broken := strings.Replace(file, "  - name: newcomer\n    sha256: "+auth.KeySHA256(newKey), "  - name: Bad Name\n    sha256: 00", 1)
	if err := os.WriteFile(e.KeysFile, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Guard.Reload(); err == nil {
		t.Error("a bad keys file reloaded without error")
	}
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:r", Header: bearer(newKey)}), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:r", Header: bearer(k.ops)}), http.StatusOK, "")
	if n := testutil.ToFloat64(e.Metrics.AuthReloadErrors); n != 1 {
		t.Errorf("baton_auth_reload_errors_total %v, want 1", n)
	}
	if !strings.Contains(e.Logs.String(), `"revoked":["newcomer"]`) {
		t.Errorf("the log does not name the revoked key:\n%s", e.Logs.String())
	}
}

// No key ever reaches the log, the metrics, a body, or Redis.
func TestKeysNeverLeak(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	keys := []string{k.billing, k.ops, k.reader, k.slow, k.narrow, auth.NewKey()}
	var bodies []string
	for _, key := range keys {
		for _, rq := range []req{
			{Method: "POST", Path: "/v1/locks/billing:leak", Body: map[string]any{"fair": true}},
			{Method: "GET", Path: "/v1/locks/billing:leak"},
			{Method: "POST", Path: "/v1/sessions", Body: map[string]any{}},
			{Method: "DELETE", Path: "/v1/locks/billing:leak?force=true"},
			{Method: "GET", Path: "/metrics"},
		} {
			rq.Header = bearer(key)
			bodies = append(bodies, string(e.do(rq).Raw))
		}
	}
	ctx := context.Background()
	var dump strings.Builder
	for _, rk := range must(allKeys(ctx, e.Redis, "*")) {
		v, _ := e.Redis.Dump(ctx, rk).Result()
		dump.WriteString(rk + v)
	}
	for _, key := range keys {
		for what, hay := range map[string]string{"log": e.Logs.String(), "redis": dump.String(), "bodies": strings.Join(bodies, "\n")} {
			if strings.Contains(hay, key) || strings.Contains(hay, key[3:20]) {
				t.Errorf("a key appears in the %s", what)
			}
		}
	}
}

// An operator revokes a key's grant on a set of names (reload: the key keeps
// lock on other names). The key is refused every lease route of the revoked
// names (403), but its session still renews its holds there: PATCH
// /v1/sessions/{id} is authorized by "lock on some name" and renews every
// hold of the session, whatever the lock. With a heartbeat, the key keeps the
// revoked locks for as long as it likes; renewing a hold the key may no
// longer renew directly should be refused (or the hold left to run out).
func TestSessionRenewalSkipsLocksItsKeyWasRevoked(t *testing.T) {
	key := auth.NewKey()
	file := func(names ...string) string {
		s := fmt.Sprintf("keys:\n  - name: worker\n    sha256: %s\n    allow:\n", auth.KeySHA256(key))
		for _, n := range names {
			s += fmt.Sprintf("      - names: %q\n        actions: [lock, read]\n", n)
		}
		return s
	}
	e := newEnv(t, envOptions{Keys: file("billing:*", "other:*")})
	as := bearer(key)
	s := e.newSession(map[string]any{"ttl_ms": 2000}, as)
	l := e.do(req{Method: "POST", Path: "/v1/locks/billing:rv", Body: map[string]any{"session": s.Str("session")}, Header: as})
	wantStatus(t, l, http.StatusCreated, "")

	if err := os.WriteFile(e.KeysFile, []byte(file("other:*")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Guard.Reload(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.do(req{Method: "PATCH", Path: l.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: as}), http.StatusForbidden, "forbidden")
	r := e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: as})
	t.Logf("session renewal after the revocation: %d", r.Status)
	time.Sleep(2500 * time.Millisecond) // past the hold's deadline before the renewal
	st, err := e.Store.State(t.Context(), "billing:rv")
	if err != nil {
		t.Fatal(err)
	}
	if st.Held {
		t.Errorf("after its grant on billing:* was revoked, the key renewed its hold on billing:rv through its session: held, %v left",
			st.TTL.Round(time.Second))
	}
}
