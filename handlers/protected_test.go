package handlers_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Protected mode (the default) serves a loopback peer with every right, but
// only when the request is what a program on this host sends. Each test sends
// over real HTTP to a real loopback listener, so the peer is loopback and only
// the request itself tells the cases apart.

// A web page reached through DNS rebinding calls Baton by the attacker's host
// name: refused, and nothing changes; the same request by a loopback name is
// served.
func TestProtectedModeRefusesRebindingHost(t *testing.T) {
	e := newEnv(t, envOptions{Protected: true})
	port := e.URL[strings.LastIndex(e.URL, ":")+1:]
	e.acquire("deploy", map[string]any{"ttl_ms": 60000})
	for _, host := range []string{"rebind.attacker.example:" + port, "rebind.attacker.example", "0.0.0.0:" + port, "evil.localhost:" + port} {
		before := e.snapshot()
		r := e.do(req{Method: "DELETE", Path: "/v1/locks/deploy?force=true", Header: map[string]string{"Host": host}})
		wantStatus(t, r, http.StatusUnauthorized, "unauthorized")
		if !strings.Contains(r.Str("detail"), "Host must be localhost") || !strings.Contains(r.Str("detail"), "BATON_AUTH_FILE") {
			t.Errorf("Host %s: detail %q, want it to name the Host rule and keys", host, r.Str("detail"))
		}
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/rebound", Body: map[string]any{}, Header: map[string]string{"Host": host}}),
			http.StatusUnauthorized, "unauthorized")
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks", Header: map[string]string{"Host": host}}), http.StatusUnauthorized, "unauthorized")
		e.unchanged("Host "+host, before, e.snapshot())
	}
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost"} {
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/deploy", Header: map[string]string{"Host": host}}), http.StatusOK, "")
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/deploy?force=true", Header: map[string]string{"Host": "localhost:" + port}}), http.StatusOK, "")
}

// Requests a browser sends for a page of another origin carry Origin (every
// POST, PATCH and DELETE does) or Sec-Fetch-Site: cross-site. Refused; the
// dashboard's own origin is served.
func TestProtectedModeRefusesOtherOrigins(t *testing.T) {
	e := newEnv(t, envOptions{Protected: true})
	own := e.URL // http://127.0.0.1:port, the origin of a page Baton served
	held := e.acquire("deploy", map[string]any{"ttl_ms": 60000})
	for _, h := range []map[string]string{
		{"Origin": "https://attacker.example"},
		{"Origin": "http://127.0.0.1:3000"},
		{"Origin": "http://localhost" + own[strings.LastIndex(own, ":"):]}, // same port, another origin
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": own, "Sec-Fetch-Site": "cross-site"},
	} {
		before := e.snapshot()
		for _, rq := range []req{
			{Method: "POST", Path: "/v1/locks/taken", Body: map[string]any{"ttl_ms": 86400000}, Header: h},
			{Method: "DELETE", Path: "/v1/locks/deploy?force=true", Header: h},
			{Method: "PATCH", Path: held.Str("url"), Body: map[string]any{"ttl_ms": 86400000}, Header: h},
			{Method: "GET", Path: "/v1/locks", Header: h},
		} {
			r := e.do(rq)
			wantStatus(t, r, http.StatusUnauthorized, "unauthorized")
			if !strings.Contains(r.Str("detail"), "another origin") {
				t.Errorf("%s %s with %v: detail %q", rq.Method, rq.Path, h, r.Str("detail"))
			}
		}
		e.unchanged("a request of another origin", before, e.snapshot())
	}
	own2 := map[string]string{"Origin": own, "Sec-Fetch-Site": "same-origin"}
	wantStatus(t, e.do(req{Method: "PATCH", Path: held.Str("url"), Body: map[string]any{"ttl_ms": 30000}, Header: own2}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/deploy?force=true", Header: own2}), http.StatusOK, "")
}

// A proxy or sidecar on the same host makes every client it forwards a
// loopback peer. One that says so (X-Forwarded-For, as Go's and nginx's
// usual configurations add) is refused with a detail that says to use keys;
// the way through such a proxy is keys mode, with the key passed through.
func TestProtectedModeRefusesSameHostProxy(t *testing.T) {
	e := newEnv(t, envOptions{Protected: true})
	e.acquire("deploy", map[string]any{"ttl_ms": 60000})
	proxied := proxyTo(t, e.URL)
	before := e.snapshot()
	r := proxied.do(req{Method: "DELETE", Path: "/v1/locks/deploy?force=true"})
	wantStatus(t, r, http.StatusUnauthorized, "unauthorized")
	if d := r.Str("detail"); !strings.Contains(d, "through a proxy") || !strings.Contains(d, "BATON_AUTH_FILE") {
		t.Errorf("detail %q: want it to say the request was proxied and how to use keys", d)
	}
	wantStatus(t, proxied.do(req{Method: "POST", Path: "/v1/locks/other", Body: map[string]any{}}), http.StatusUnauthorized, "unauthorized")
	e.unchanged("a proxied request", before, e.snapshot())
	for _, h := range []string{"Forwarded", "Via", "X-Real-Ip", "X-Forwarded-Host"} {
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/deploy", Header: map[string]string{h: "for=203.0.113.9"}}),
			http.StatusUnauthorized, "unauthorized")
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/deploy?force=true"}), http.StatusOK, "") // direct

	k := newTestKeys()
	keyed := newEnv(t, envOptions{Keys: k.file()})
	through := proxyTo(t, keyed.URL)
	wantStatus(t, through.do(req{Method: "POST", Path: "/v1/locks/billing:x", Body: map[string]any{}}), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, through.do(req{Method: "POST", Path: "/v1/locks/billing:x", Body: map[string]any{}, Header: bearer(k.billing)}), http.StatusCreated, "")
}

// proxyTo starts a reverse proxy on loopback in front of target, as
// httputil.NewSingleHostReverseProxy does it (X-Forwarded-For added), and
// returns an env whose requests go through it.
func proxyTo(t *testing.T, target string) *env {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(px.Close)
	return &env{t: t, URL: px.URL, client: &http.Client{}}
}

// A request body must come with a JSON Content-Type, in every mode: without
// one, or with text/plain, a browser sends a cross-origin POST without asking
// the server first. A body-less request needs none.
func TestBodyNeedsJSONContentType(t *testing.T) {
	k := newTestKeys()
	for _, mode := range []struct {
		name string
		o    envOptions
		auth map[string]string
	}{
		{"protected", envOptions{Protected: true}, nil},
		{"keys", envOptions{Keys: k.file()}, bearer(k.ops)},
		{"off", envOptions{}, nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.o)
			with := func(ct string) map[string]string {
				h := map[string]string{"Content-Type": ct}
				for k, v := range mode.auth {
					h[k] = v
				}
				return h
			}
			held := e.do(req{Method: "POST", Path: "/v1/locks/held", Body: map[string]any{"ttl_ms": 60000}, Header: with("application/json")})
			wantStatus(t, held, http.StatusCreated, "")
			before := e.snapshot()
			for _, tt := range []struct {
				method, path, body, ct string
			}{
				{"POST", "/v1/locks/blob", `{"ttl_ms":86400000}`, ""},
				{"POST", "/v1/locks/blob", `{"ttl_ms":86400000}`, "text/plain"},
				{"POST", "/v1/locks/blob", `{"ttl_ms":86400000}`, "text/plain; charset=utf-8"},
				{"POST", "/v1/locks/blob", ` `, ""},
				{"POST", "/v1/locks/blob", `{}`, "application/x-www-form-urlencoded"},
				{"POST", "/v1/sessions", `{"ttl_ms":86400000}`, ""},
				{"PATCH", held.Str("url"), `{"ttl_ms":86400000}`, ""},
				{"DELETE", held.Str("url"), `{}`, "text/plain"},
				{"DELETE", "/v1/locks/held?force=true", `x`, ""},
				{"GET", "/v1/locks/held", `{}`, ""},
			} {
				r := e.do(req{Method: tt.method, Path: tt.path, Body: tt.body, Header: with(tt.ct)})
				wantStatus(t, r, http.StatusUnsupportedMediaType, "unsupported-media-type")
				if d := r.Str("detail"); !strings.Contains(d, "Content-Type: application/json") || !strings.Contains(d, "--json") {
					t.Errorf("%s %s: detail %q, want it to say what to send", tt.method, tt.path, d)
				}
			}
			e.unchanged("a body without a JSON Content-Type", before, e.snapshot())
			for _, ct := range []string{"", "text/plain"} { // no body: all defaults, whatever the header says
				wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/empty-" + strings.ReplaceAll(ct, "/", "-"), Header: with(ct)}), http.StatusCreated, "")
			}
			wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/merge", Body: `{}`, Header: with("application/merge-patch+json")}), http.StatusCreated, "")
		})
	}
}

// Every answer says X-Content-Type-Options: nosniff, so that no browser reads
// a JSON (or problem) body as a page or a script: successes, problems, open
// routes, the dashboard, and a long-poll answered after its connection parked.
func TestEveryAnswerSaysNosniff(t *testing.T) {
	e := newEnv(t, envOptions{})
	held := e.acquire("sniff", map[string]any{"ttl_ms": 60000})
	w := e.send(req{Method: "GET", Path: "/v1/locks/sniff?wait_ms=5000&fence=" + strconv.FormatInt(held.Int("fence"), 10)})
	e.awaitWaiters(1)
	answers := []*resp{held}
	for _, rq := range []req{
		{Method: "GET", Path: "/v1/locks/sniff"},
		{Method: "POST", Path: "/v1/locks/sniff", Body: map[string]any{}},
		{Method: "POST", Path: "/v1/locks/bad%20name", Body: map[string]any{}},
		{Method: "GET", Path: "/nowhere"},
		{Method: "PUT", Path: "/v1/locks/sniff"},
		{Method: "GET", Path: "/livez"},
		{Method: "GET", Path: "/readyz"},
		{Method: "GET", Path: "/metrics"},
		{Method: "GET", Path: "/openapi.yaml"},
		{Method: "HEAD", Path: "/v1/locks/sniff"},
	} {
		answers = append(answers, e.do(rq))
	}
	ui, err := http.Get(e.URL + "/ui/") // the dashboard: not part of the API's spec
	if err != nil {
		t.Fatal(err)
	}
	ui.Body.Close()
	answers = append(answers, &resp{Status: ui.StatusCode, Header: ui.Header})
	wantStatus(t, e.do(req{Method: "DELETE", Path: held.Str("url")}), http.StatusOK, "")
	answers = append(answers, awaitAnswer(t, w, 5*time.Second).r)
	for i, r := range answers {
		if got := r.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("answer %d (%d %s): X-Content-Type-Options %q, want nosniff", i, r.Status, r.Str("type"), got)
		}
	}
}
