package handlers_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/handlers"
)

// Fuzz targets of paths: lock names on every lock route, and the whole router.
// The helpers they share are in fuzz_test.go.

// lockRoutes are the routes under /v1/locks/{name}, in the order FuzzLockName
// sends them, with what each answers a valid name: $LEASE is the lease the POST
// was granted, $TICKET an id never issued.
var lockRoutes = []struct {
	method, suffix string
	want           int
}{
	{http.MethodPost, "", http.StatusCreated},
	{http.MethodGet, "", http.StatusOK},
	{http.MethodGet, "/leases/$LEASE", http.StatusOK},
	{http.MethodPatch, "/leases/$LEASE", http.StatusOK},
	{http.MethodDelete, "/leases/$LEASE", http.StatusOK},
	{http.MethodGet, "/tickets/$TICKET", http.StatusGone},
	{http.MethodDelete, "/tickets/$TICKET", http.StatusGone},
	{http.MethodDelete, "?force=true", http.StatusOK},
}

// FuzzLockName sends an arbitrary string as the {name} of every lock route, once
// url.PathEscape'd and once raw (when that makes a URL): a valid name is served,
// any other is 400 invalid-name (404 for the empty name where no route takes it),
// and no key is ever created but under <prefix>:{<name>} of a name served.
func FuzzLockName(f *testing.F) {
	for _, name := range []string{
		"a", "AZaz09._:-", strings.Repeat("n", 200), "invoices:2024-06", ".", "..", "-", ":", "_",
		"", " ", "a b", "a{b", "a}b", "{held}", "held}:x", "held/x", "/", "held\x00", "held\n", "a%b", "%41",
		"a%2Fb", "a+b", "held*", "a?b", "a?force=true", "a#b", "café", "日本", "\xff", strings.Repeat("n", 201),
		"x/leases/y", "x/tickets/y", "../livez", "a;b", "a=b", "a@b", "a~b",
		"...", ".a", "a..", "%2E", "%2E%2E", ".%2e", "./x", "../leases/x",
	} {
		f.Add(name)
	}
	e := fuzzEnv(f, apiLimits)
	f.Fuzz(func(t *testing.T, name string) {
		e := envIn(t, e)
		defer e.flush()
		served := e.nameRoutes(url.PathEscape(name), true)
		if name != url.PathEscape(name) {
			served = append(served, e.nameRoutes(name, false)...)
		}
		e.checkKeys(func(n string) bool { return slices.Contains(served, n) })
	})
}

// nameRoutes sends every lock route with sent as the {name} segment, checks each
// answer, and returns the names the 2xx answers served. exact: sent is the
// escaped form, and a valid name must get exactly lockRoutes' answers.
func (e *env) nameRoutes(sent string, exact bool) []string {
	e.t.Helper()
	lease, ticket := unknownID(), unknownID()
	var served []string
	for _, r := range lockRoutes {
		suffix := strings.NewReplacer("$LEASE", lease, "$TICKET", ticket).Replace(r.suffix)
		hr, got := e.fuzzSend(r.method, "/v1/locks/"+sent+suffix, nil, nil)
		if hr == nil {
			if exact {
				e.t.Fatalf("%s /v1/locks/%s: not a URL", r.method, sent)
			}
			continue
		}
		e.fuzzCheck(hr, nil, got, apiLimits.MaxWait)
		what := fmt.Sprintf("%s %s: status %d %s", r.method, hr.URL.RequestURI(), got.Status, got.Str("type"))
		if got.Status < 300 && got.Str("name") != "" {
			served = append(served, got.Str("name"))
		}
		name, routed := routedName(hr, suffix)
		switch valid := validName(name); {
		case !routed: // the path routes elsewhere: only the checks every answer gets
		case valid && exact && got.Status != r.want:
			e.t.Errorf("%s, want %d: %s", what, r.want, got.Raw)
		case valid && got.Status < 300 && got.Status != http.StatusNoContent && got.Str("name") != name:
			e.t.Errorf("%s: name %q, want %q", what, got.Str("name"), name)
		case valid && (got.Str("type") == "/problems/invalid-name" || got.Status == 404 && got.Str("type") == "/problems/not-found" || got.Status == 405):
			e.t.Errorf("%s, want the name %q served: %s", what, name, got.Raw)
		case !valid && name == "" && got.Status == http.StatusNotFound && got.Str("type") == "/problems/not-found":
		case !valid && (got.Status != http.StatusBadRequest || got.Str("type") != "/problems/invalid-name"):
			e.t.Errorf("%s, want 400 invalid-name for %q: %s", what, name, got.Raw)
		}
		if r.method == http.MethodPost && got.Status == http.StatusCreated {
			lease = got.Str("lease")
		}
	}
	return served
}

// routedName is the {name} the server takes from hr as it goes on the wire (it
// parses the request URI as url.ParseRequestURI does; chi routes on the escaped
// path when it differs from the decoded one, and the server then unescapes the
// segment), and whether the request has the shape /v1/locks/{name}+suffix at all.
func routedName(hr *http.Request, suffix string) (string, bool) {
	u, err := url.ParseRequestURI(hr.URL.RequestURI())
	if err != nil {
		return "", false
	}
	p := u.Path
	if u.RawPath != "" {
		p = u.RawPath
	}
	suffixPath, suffixQuery, _ := strings.Cut(suffix, "?")
	rest, ok := strings.CutPrefix(p, "/v1/locks/")
	name, ok2 := strings.CutSuffix(rest, suffixPath)
	if !ok || !ok2 || strings.Contains(name, "/") || u.RawQuery != suffixQuery {
		return "", false
	}
	if u.RawPath != "" { // the server unescapes what chi routed on: %3A is ':'
		unescaped, err := url.PathUnescape(name)
		if err != nil {
			return "%", true // no name at all: invalid
		}
		name = unescaped
	}
	return name, true
}

var (
	routerMethods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete,
		http.MethodPut, http.MethodHead, http.MethodOptions}
	routerPrefixes = []string{"/v1/locks/", "/v1/locks/held", "/v1/locks/held/leases/", "/v1/locks/held/tickets/",
		"/v1/locks/free", "/", "/v1/", "/v1/locks", "/livez", "/readyz", "/metrics", "/openapi.yaml"}
	// routerLimits keep every wait short: one input is one request, over a lock
	// held for a minute.
	routerLimits = handlers.Limits{DefaultTTL: 30 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 100 * time.Millisecond}
)

// routerSeed is one FuzzRouter input: indexes into routerMethods and
// routerPrefixes, the rest of the path, the query, the body and a Prefer header.
type routerSeed struct {
	method, prefix    uint8
	path, query, body string
	prefer            string
}

var routerSeeds = []routerSeed{
	{0, 1, "", "", "", ""},
	{0, 1, "", "wait_ms=50", "", ""},
	{0, 1, "", "wait_ms=50&fence=1", "", ""},
	{0, 1, "", "wait_ms=abc", "", ""},
	{0, 1, "", "wait_ms=-1&fence=-1", "", ""},
	{0, 1, "", "wait_ms=", "", ""},
	{0, 1, "", "wait_ms=%zz", "", ""},
	{0, 1, "", "wait=5", "", ""},
	{0, 1, "", "fence=99999999999999999999", "", ""},
	{0, 1, "", "", "", "wait=0"},
	{0, 1, "", "", "", "wait=1"},
	{0, 1, "", "", "", "wait=9300000000000000"},
	{0, 4, "", "wait_ms=100", "", ""},
	{1, 1, "", "", "{}", ""},
	{1, 1, "", "", `{"fair":true}`, ""},
	{1, 1, "", "", `{"lease":"$LEASE"}`, ""},
	{1, 1, "", "", `{"lease":"$TICKET"}`, ""},
	{1, 1, "", "", `{"wait_ms":50}`, ""},
	{1, 4, "", "", `{"ttl_ms":1000}`, ""},
	{1, 4, "", "", "", "wait=0"},
	{1, 4, "", "ttl_ms=1000", "", ""},
	{1, 0, "x", "", `{"ttl_ms":1e30}`, ""},
	{1, 4, "", "", "[", ""},
	{1, 4, "", "", bodyOf(16<<10 + 1), ""},
	{3, 1, "", "force=true", "", ""},
	{3, 1, "", "", "", ""},
	{3, 1, "", "force=yes", "", ""},
	{3, 1, "", "force=true&wait=5", "", ""},
	{0, 2, "$LEASE", "", "", ""},
	{2, 2, "$LEASE", "", `{"ttl_ms":5000}`, ""},
	{2, 2, "$LEASE", "", "", ""},
	{3, 2, "$LEASE", "", "", ""},
	{0, 2, "unknown", "", "", ""},
	{0, 2, "$TICKET", "", "", ""},
	{0, 3, "$TICKET", "wait_ms=50", "", ""},
	{0, 3, "$TICKET", "", "", "wait=0"},
	{0, 3, "$TICKET", "fence=1", "", ""},
	{3, 3, "$TICKET", "", "", ""},
	{0, 3, "$LEASE", "", "", ""},
	{1, 2, "$LEASE", "", "{}", ""},
	{4, 1, "", "", "{}", ""},
	{2, 1, "", "", "{}", ""},
	{1, 3, "$TICKET", "", "", ""},
	{4, 0, "a%2Fb", "", "", ""},
	{5, 8, "", "", "", ""},
	{5, 9, "", "", "", ""},
	{5, 10, "", "", "", ""},
	{5, 11, "", "", "", ""},
	{5, 1, "", "", "", ""},
	{5, 1, "", "wait_ms=50&fence=1", "", ""},
	{5, 1, "", "wait_ms=abc", "", ""},
	{5, 2, "$LEASE", "", "", ""},
	{5, 2, "unknown", "", "", ""},
	{5, 3, "$TICKET", "wait_ms=50", "", ""},
	{5, 3, "$TICKET", "", "", "wait=0"},
	{5, 0, "..", "", "", ""},
	{5, 0, "a%20b", "", "", ""},
	{5, 6, "locks/held", "", "", ""},
	{6, 0, "x", "", "", ""},
	{0, 0, "", "", "", ""},
	{0, 7, "", "", "", ""},
	{0, 0, "/leases/x", "", "", ""},
	{0, 0, "a%2Fb", "", "", ""},
	{0, 0, "a%20b", "", "", ""},
	{0, 0, "caf%C3%A9", "", "", ""},
	{0, 0, "%zz", "", "", ""},
	{0, 0, "a b\x00", "", "", ""},
	{0, 0, "held/leases/$LEASE/x", "", "", ""},
	{0, 0, "..", "", "", ""},
	{0, 0, ".", "", "", ""},
	{1, 0, "..", "", "{}", ""},
	{0, 0, "../leases/$LEASE", "", "", ""},
	{2, 0, "./leases/$LEASE", "", "", ""},
	{3, 0, "../tickets/$TICKET", "", "", ""},
	{3, 0, "..", "force=true", "", ""},
	{0, 0, "held#frag", "", "", ""},
	{0, 8, "", "", "", ""},
	{0, 9, "", "", "", ""},
	{0, 10, "", "", "", ""},
	{0, 11, "", "", "", ""},
	{1, 8, "", "", "", ""},
	{3, 10, "", "", "", ""},
	{0, 5, "", "", "", ""},
	{0, 6, "locks/held", "", "", ""},
}

// The FuzzRouter server runs in keys mode with two keys made per process:
// routerOwner may do everything ("*": admin, metrics) and made the lease and the
// ticket; routerOther may lock and read only "other:*". A fuzzed Authorization
// header names them as $KEY and $OTHER, so no key is ever in the corpus.
var (
	routerOwner, routerOther = auth.NewKey(), auth.NewKey()
	routerKeys               = fmt.Sprintf(`keys:
  - name: owner
    sha256: %s
    allow:
      - names: "*"
        actions: [admin, metrics]
  - name: other
    sha256: %s
    allow:
      - names: "other:*"
        actions: [lock, read]
`, auth.KeySHA256(routerOwner), auth.KeySHA256(routerOther))
	routerAuth = strings.NewReplacer("$KEY", routerOwner, "$OTHER", routerOther)
)

// routerAuthSeeds are the Authorization headers every request of authRoutes is
// seeded with: missing, an empty key, garbage, the owner's key, another grant's
// key, and a few near misses.
var routerAuthSeeds = []string{
	"", "Bearer ", "garbage", "Bearer $KEY", "Bearer $OTHER",
	"bearer   $KEY", "Basic $KEY", "Bearer $KEYx", "Bearer x$KEY", "$KEY", "Bearer\t$KEY", "Bearer $KEY $OTHER",
}

// authRoutes are the requests (as routerSeeds) seeded with each of routerAuthSeeds.
var authRoutes = []routerSeed{
	{1, 1, "", "", "{}", ""},                    // POST /v1/locks/held: lock
	{0, 1, "", "", "", ""},                      // GET /v1/locks/held: read
	{3, 1, "", "force=true", "", ""},            // DELETE /v1/locks/held?force=true: admin
	{2, 2, "$LEASE", "", `{"ttl_ms":5000}`, ""}, // PATCH the owner's lease
	{3, 3, "$TICKET", "", "", ""},               // DELETE the owner's ticket
	{0, 7, "", "", "", ""},                      // GET /v1/locks: the list
	{0, 10, "", "", "", ""},                     // GET /metrics: metrics
	{0, 8, "", "", "", ""},                      // GET /livez: open
	{1, 0, "other:x", "", "{}", ""},             // POST /v1/locks/other:x: the other key's grant
	{1, 6, "sessions", "", "{}", ""},            // POST /v1/sessions
}

// who is the key a request's Authorization header authenticates, as the
// contract reads it (the server trims the value; the scheme is case-insensitive
// and followed by spaces): "owner", "other", or "" for none.
func who(header string) string {
	scheme, key, ok := strings.Cut(strings.Trim(header, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	switch strings.TrimLeft(key, " ") {
	case routerOwner:
		return "owner"
	case routerOther:
		return "other"
	}
	return ""
}

// openPath reports whether p is served without a key: /livez, /readyz,
// /openapi.yaml and the dashboard's static files.
func openPath(p string) bool {
	return p == "/livez" || p == "/readyz" || p == "/openapi.yaml" || p == "/ui" || strings.HasPrefix(p, "/ui/")
}

// FuzzRouter sends a fuzzed method, path, query, body, Prefer and Authorization
// header to the whole router, in keys mode, over a lock "held" with the owner's
// lease ($LEASE in path, query or body) and queued ticket ($TICKET). It checks
// what holds for every request (see fuzzCheck; and no key but under
// <prefix>:{<valid name>}), and access control: without a valid key nothing
// but an open path is served (no 2xx or 3xx, never 403, 401 with its challenge)
// and Redis is left as it was; the other key never changes "held" nor sees it,
// its lease or its ticket in a 2xx answer; no key is ever in an answer or the
// log; and the log holds nothing but the audit line of a 401 or 403 (or the
// summary of earlier 401s).
func FuzzRouter(f *testing.F) {
	for _, s := range routerSeeds {
		f.Add(s.method, s.prefix, s.path, s.query, []byte(s.body), s.prefer, "Bearer $KEY")
	}
	for _, s := range authRoutes {
		for _, a := range routerAuthSeeds {
			f.Add(s.method, s.prefix, s.path, s.query, []byte(s.body), s.prefer, a)
		}
	}
	e := fuzzEnvKeys(f, routerLimits, routerKeys)
	owner := map[string]string{"Authorization": "Bearer " + routerOwner}
	f.Fuzz(func(t *testing.T, method, prefix uint8, path, query string, body []byte, prefer, authz string) {
		if !validHeader(prefer) || !validHeader(authz) {
			t.Skip("Prefer or Authorization is no header value")
		}
		e := envIn(t, e)
		defer e.flush()
		held := e.do(req{Method: http.MethodPost, Path: "/v1/locks/held", Body: map[string]any{"ttl_ms": 60000}, Header: owner})
		wantStatus(t, held, http.StatusCreated, "")
		lease := held.Str("lease")
		tk := e.do(req{Method: http.MethodPost, Path: "/v1/locks/held", Body: map[string]any{"fair": true}, Header: owner})
		wantStatus(t, tk, http.StatusAccepted, "")
		ids := strings.NewReplacer("$LEASE", lease, "$TICKET", tk.Str("ticket"))
		target := routerPrefixes[int(prefix)%len(routerPrefixes)] + ids.Replace(path)
		if query != "" {
			target += "?" + ids.Replace(query)
		}
		body = []byte(ids.Replace(string(body)))
		m := routerMethods[int(method)%len(routerMethods)]
		header := bodyHeader(0, prefer)
		if authz = routerAuth.Replace(authz); authz != "" {
			header.Set("Authorization", authz)
		}
		before := e.snapshot()
		hr, got := e.fuzzSend(m, target, body, header)
		if hr == nil {
			if hr, got = e.fuzzSend(m, escapeTarget(target), body, header); hr == nil {
				t.Fatalf("%q escaped is still no URL: %q", target, escapeTarget(target))
			}
		}
		e.checkAccess(hr, got, who(authz), before, lease, tk.Str("ticket"))
		e.fuzzCheck(hr, body, got, routerLimits.MaxWait)
		e.checkKeys(validName)
	})
}

// checkAccess holds a FuzzRouter answer to access control (see FuzzRouter) for
// a request that authenticates as as ("owner", "other" or "": none), and takes
// the audit lines of its refusal out of the log, so that fuzzCheck sees only
// what else was logged.
func (e *env) checkAccess(hr *http.Request, got *resp, as string, before map[string]string, lease, ticket string) {
	e.t.Helper()
	what := fmt.Sprintf("%s %s as %q: status %d", hr.Method, hr.URL.RequestURI(), as, got.Status)
	logged := e.Logs.take()
	for _, k := range []string{routerOwner, routerOther} {
		if strings.Contains(string(got.Raw), k) || strings.Contains(fmt.Sprint(got.Header), k) || strings.Contains(logged, k) {
			e.t.Errorf("%s: a key is in the answer or the log", what)
		}
	}
	var rest []string
	for _, line := range strings.Split(strings.TrimSpace(logged), "\n") {
		if line == "" || strings.Contains(line, `"audit":true`) &&
			(got.Status == http.StatusUnauthorized && strings.Contains(line, `"event":"unauthorized"`) ||
				strings.Contains(line, `"event":"unauthorized_summary"`) || // of earlier inputs' 401s, at any time
				got.Status == http.StatusForbidden && strings.Contains(line, `"event":"forbidden"`)) {
			continue
		}
		rest = append(rest, line)
	}
	if len(rest) > 0 {
		e.t.Errorf("%s: server logged:\n%s", what, strings.Join(rest, "\n"))
	}
	open := openPath(hr.URL.Path)
	switch {
	case got.Status == http.StatusUnauthorized && got.Header.Get("WWW-Authenticate") != auth.Challenge:
		e.t.Errorf("%s: WWW-Authenticate %q, want %q", what, got.Header.Get("WWW-Authenticate"), auth.Challenge)
	case as == "" && !open && got.Status < 400:
		e.t.Errorf("%s: served without a valid key: %s", what, got.Raw)
	case as == "" && got.Status == http.StatusForbidden:
		e.t.Errorf("%s: 403 without a valid key, want 401: %s", what, got.Raw)
	case as == "other" && got.Status < 300 && (strings.Contains(string(got.Raw), `"held"`) ||
		strings.Contains(string(got.Raw), lease) || strings.Contains(string(got.Raw), ticket)):
		e.t.Errorf("%s: the other key was shown the owner's lock: %s", what, got.Raw)
	}
	// The idempotency secret is the store's, which writes it back in the
	// background (after flush deleted it): no request's doing.
	for _, k := range []string{e.Prefix + ":secret", e.Prefix + ":secret:fp"} {
		delete(before, k)
	}
	after := e.snapshot()
	for _, k := range []string{e.Prefix + ":secret", e.Prefix + ":secret:fp"} {
		delete(after, k)
	}
	switch as {
	case "":
		e.unchanged(what+" (no valid key)", before, after)
	case "other":
		for k, v := range before {
			w, ok := after[k]
			if strings.Contains(k, ":{held}") && (ok && w != v || !ok && !strings.HasSuffix(v, expiring)) {
				e.t.Errorf("%s: the other key changed %s: %s, was %s", what, k, after[k], v)
			}
		}
	}
}

// escapeTarget percent-encodes what keeps a path and query from being a URL:
// control bytes, spaces, non-ASCII and a '%' that starts no escape.
func escapeTarget(s string) string {
	hex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '%' && !(i+2 < len(s) && hex(s[i+1]) && hex(s[i+2])) {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
