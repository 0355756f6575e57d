package handlers_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/auth"
)

// protectedSeeds are FuzzProtectedRouter's headers: Host, Origin,
// Sec-Fetch-Site, a proxy header ("Name: value", or ""), and Content-Type.
var protectedSeeds = []struct{ host, origin, site, proxy, ctype string }{
	{"$HOST", "", "", "", "application/json"},
	{"localhost:$PORT", "http://localhost:$PORT", "same-origin", "", "application/json"},
	{"rebind.attacker.example:$PORT", "", "", "", "application/json"},
	{"rebind.attacker.example:$PORT", "http://rebind.attacker.example:$PORT", "same-origin", "", "application/json"},
	{"$HOST", "https://attacker.example", "cross-site", "", ""},
	{"$HOST", "null", "", "", "text/plain"},
	{"$HOST", "", "cross-site", "", "application/json"},
	{"$HOST", "", "", "X-Forwarded-For: 203.0.113.7", "application/json"},
	{"$HOST", "", "", "Via: 1.1 envoy", "application/json"},
	{"$HOST", "", "", "Forwarded: for=127.0.0.1", ""},
	{"[::1]:$PORT", "", "", "", ""},
	{"[127.0.0.1]", "", "", "", ""},
	{"0.0.0.0:$PORT", "", "", "", "application/json"},
	{"$HOST", "", "", "", "text/plain;charset=utf-8"},
	{"$HOST", "", "", "", ""},
}

// FuzzProtectedRouter is FuzzRouter for protected mode: a fuzzed method,
// path, query and body with a fuzzed Host, Origin, Sec-Fetch-Site, proxy
// header and Content-Type, over real HTTP from loopback, to a lock "held" and
// its queued ticket. What protected mode refuses (a Host that is no loopback
// name, a proxy's header, another origin, Sec-Fetch-Site: cross-site) is never
// served but on an open path, and leaves Redis as it was; a body without a
// JSON Content-Type is never served either. Every answer holds to what
// fuzzCheck checks, and the log has nothing but 401 audit lines.
func FuzzProtectedRouter(f *testing.F) {
	for _, h := range protectedSeeds {
		for _, s := range authRoutes {
			f.Add(s.method, s.prefix, s.path, s.query, []byte(s.body), h.host, h.origin, h.site, h.proxy, h.ctype)
		}
	}
	e := fuzzEnvMode(f, routerLimits, "", true)
	port := e.URL[strings.LastIndex(e.URL, ":")+1:]
	vars := strings.NewReplacer("$HOST", strings.TrimPrefix(e.URL, "http://"), "$PORT", port)
	f.Fuzz(func(t *testing.T, method, prefix uint8, path, query string, body []byte, host, origin, site, proxy, ctype string) {
		host, origin = vars.Replace(host), vars.Replace(origin)
		if !validHeader(origin) || !validHeader(site) || !validHeader(proxy) || !validHeader(ctype) || !hostBytes(host) {
			t.Skip("not a header Go's client sends as it is")
		}
		proxyName, proxyValue, isProxy := strings.Cut(proxy, ": ")
		if proxy != "" && (!isProxy || !tokenBytes(proxyName)) {
			t.Skip("no header")
		}
		e := envIn(t, e)
		defer e.flush()
		held := e.do(req{Method: http.MethodPost, Path: "/v1/locks/held", Body: map[string]any{"ttl_ms": 60000}})
		wantStatus(t, held, http.StatusCreated, "")
		tk := e.do(req{Method: http.MethodPost, Path: "/v1/locks/held", Body: map[string]any{"fair": true}})
		wantStatus(t, tk, http.StatusAccepted, "")
		ids := strings.NewReplacer("$LEASE", held.Str("lease"), "$TICKET", tk.Str("ticket"))
		target := routerPrefixes[int(prefix)%len(routerPrefixes)] + ids.Replace(path)
		if query != "" {
			target += "?" + ids.Replace(query)
		}
		body = []byte(ids.Replace(string(body)))
		m := routerMethods[int(method)%len(routerMethods)]
		header := http.Header{}
		for k, v := range map[string]string{"Origin": origin, "Sec-Fetch-Site": site, "Content-Type": ctype} {
			if v != "" {
				header.Set(k, v)
			}
		}
		if proxy != "" {
			header.Set(proxyName, proxyValue)
		}
		before := e.snapshot()
		hr, got := e.fuzzSendHost(m, target, body, header, host)
		if hr == nil {
			if hr, got = e.fuzzSendHost(m, escapeTarget(target), body, header, host); hr == nil {
				t.Fatalf("%q escaped is still no URL", target)
			}
		}
		what := fmt.Sprintf("%s %s (Host %q, Origin %q, Sec-Fetch-Site %q, %q, Content-Type %q): %d",
			hr.Method, hr.URL.RequestURI(), host, origin, site, proxy, ctype, got.Status)
		proxied := false
		for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Via"} {
			proxied = proxied || hr.Header.Get(h) != "" || len(hr.Header.Values(h)) > 0
		}
		refused := proxied || !auth.LoopbackHost(host) || strings.EqualFold(site, "cross-site") ||
			origin != "" && !strings.EqualFold(origin, "http://"+host)
		open := openPath(hr.URL.Path)
		switch {
		case refused && !open && got.Status < 400:
			t.Errorf("%s: served, though protected mode refuses it: %s", what, got.Raw)
		case got.Status == http.StatusUnauthorized && (!refused || got.Header.Get("WWW-Authenticate") != auth.Challenge || !got.Close):
			t.Errorf("%s: 401 (WWW-Authenticate %q, connection closed %v) for a request protected mode serves, or without its challenge or close: %s",
				what, got.Header.Get("WWW-Authenticate"), got.Close, got.Raw)
		case len(body) > 0 && !jsonType(ctype) && !open && got.Status < 300:
			t.Errorf("%s: a body without a JSON Content-Type was served: %s", what, got.Raw)
		}
		if refused && !open {
			e.unchanged(what, before, e.snapshot())
		}
		var rest []string
		for _, line := range strings.Split(strings.TrimSpace(e.Logs.take()), "\n") {
			if line != "" && !(strings.Contains(line, `"audit":true`) && strings.Contains(line, `"event":"unauthorized`)) {
				rest = append(rest, line)
			}
		}
		if len(rest) > 0 {
			t.Errorf("%s: server logged:\n%s", what, strings.Join(rest, "\n"))
		}
		e.fuzzCheck(hr, body, got, routerLimits.MaxWait)
		e.checkKeys(validName)
	})
}

// fuzzSendHost is fuzzSend with the request's Host set to host.
func (e *env) fuzzSendHost(method, target string, body []byte, header http.Header, host string) (*http.Request, *resp) {
	e.t.Helper()
	header = header.Clone()
	header.Set("Host", host)
	return e.fuzzSend(method, target, body, header)
}

// hostBytes reports whether h is a non-empty Host that Go's client sends as
// it is (a subset of what it accepts: letters, digits, and . : [ ] % -).
func hostBytes(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".:[]%-", c) >= 0) {
			return false
		}
	}
	return true
}

// tokenBytes reports whether s is a header name (RFC 9110 token).
func tokenBytes(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// jsonType reports whether a Content-Type is JSON, as the contract reads it.
func jsonType(ct string) bool {
	mt := strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	return mt == "application/json" || strings.HasSuffix(mt, "+json") && !strings.ContainsAny(mt, " \t")
}
