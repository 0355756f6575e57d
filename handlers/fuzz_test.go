package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// Native fuzz targets (go test -fuzz, `make fuzz`) over the whole stack on a real
// Redis. Whatever the input, the server never panics (recoverer would answer 500;
// a panic above it breaks the connection) and never answers 5xx, every response
// carries Cache-Control and X-Request-Id and, where the spec can route the request,
// matches api/openapi.yaml, and a rejected request leaves Redis as it was.
//
// Each target builds one env before f.Fuzz. Every input gets lock names of its own
// and the env's keys are deleted after it, so inputs never meet and KEYS stays
// cheap however long the run. Seeds are added in code; inputs the fuzzer found
// worth keeping are in testdata/fuzz/<FuzzName>/. Without -fuzz, both run as
// ordinary tests.

// apiLimits are the defaults of API.md.
var apiLimits = handlers.Limits{DefaultTTL: 30 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second}

var lockNameRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)

// validName reports whether n is a lock name: the pattern, less the dot-segments.
func validName(n string) bool { return lockNameRE.MatchString(n) && n != "." && n != ".." }

// fuzzEnv is newEnv for a fuzz target, which has an f but no *testing.T: its t
// is nil, and each input uses envIn(t, e). It logs only warnings and errors, so
// a long run does not pile up access log lines and every log line is a finding.
func fuzzEnv(f *testing.F, limits handlers.Limits) *env {
	f.Helper()
	return fuzzEnvKeys(f, limits, "")
}

// fuzzEnvKeys is fuzzEnv in keys mode when keys (a keys file, YAML) is set.
func fuzzEnvKeys(f *testing.F, limits handlers.Limits, keys string) *env {
	return fuzzEnvMode(f, limits, keys, false)
}

// fuzzEnvMode is fuzzEnv in keys mode when keys is set, in protected mode when
// protected is.
func fuzzEnvMode(f *testing.F, limits handlers.Limits, keys string, protected bool) *env {
	f.Helper()
	prefix := "fz" + strconv.FormatInt(prefixSeq.Add(1), 10) + "x" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	rdb, err := redisconn.NewClient(sharedRedis.URL())
	if err != nil {
		f.Fatal(err)
	}
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.WarnLevel)
	m := metrics.New()
	st := store.New(rdb, store.Options{Prefix: prefix, Logger: log, Metrics: m})
	var guard *auth.Guard
	if keys != "" {
		file := filepath.Join(f.TempDir(), "keys.yaml")
		if err := os.WriteFile(file, []byte(keys), 0o600); err != nil {
			f.Fatal(err)
		}
		if guard, err = auth.NewGuard(auth.Config{File: file, Logger: log}); err != nil {
			f.Fatal(err)
		}
	}
	if protected {
		if guard, err = auth.NewGuard(auth.Config{Logger: zerolog.Nop()}); err != nil {
			f.Fatal(err)
		}
	}
	srv := httptest.NewServer(handlers.NewServer(handlers.Deps{Store: st, Limits: limits, Logger: log, Metrics: m, Spec: api.Spec, Guard: guard}))
	f.Cleanup(func() {
		st.Shutdown()
		srv.Close()
		_ = st.Close()
		_ = rdb.Close()
	})
	return &env{URL: srv.URL, Store: st, Redis: sharedRedis.Client(f), Server: sharedRedis, Prefix: prefix,
		Logs: logs, Metrics: m, client: &http.Client{Timeout: 10 * time.Second}, Guard: guard}
}

// take returns what was logged since the last take, and forgets it.
func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// flush deletes every key of the env, so the next input starts on an empty Redis.
func (e *env) flush() {
	ctx := context.Background()
	keys, err := allKeys(ctx, e.Redis, e.Prefix+":*")
	if err == nil && len(keys) > 0 {
		err = e.Redis.Del(ctx, keys...).Err()
	}
	if err != nil {
		e.t.Errorf("flush: %v", err)
	}
}

// fuzzSend sends a request exactly as built from fuzzed parts: target is the path
// and query, sent as they are; no header but those given. It returns nil, nil
// when target does not make a valid request line: Go's client sends a query as
// it is, and the server would answer net/http's own 400 before any handler.
func (e *env) fuzzSend(method, target string, body []byte, header http.Header) (*http.Request, *resp) {
	e.t.Helper()
	hr, err := http.NewRequest(method, e.URL+target, bytes.NewReader(body))
	if err != nil || strings.IndexFunc(hr.URL.RequestURI(), func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return nil, nil
	}
	for k, vs := range header {
		if k == "Host" { // Go sends hr.Host, never a Host header
			hr.Host = vs[0]
			continue
		}
		hr.Header[k] = vs
	}
	hres, err := e.client.Do(hr)
	if err != nil {
		e.t.Fatalf("%s %q: %v (a panic above recoverer, or a hang)\nserver log:\n%s", method, target, err, e.Logs.take())
	}
	defer hres.Body.Close()
	raw, err := io.ReadAll(hres.Body)
	if err != nil {
		e.t.Fatalf("%s %q: read body: %v", method, target, err)
	}
	out := &resp{Status: hres.StatusCode, Header: hres.Header, Raw: raw, Close: hres.Close}
	if len(raw) > 0 && strings.Contains(hres.Header.Get("Content-Type"), "json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out.Body); err != nil {
			e.t.Errorf("%s %q: body is not JSON: %v: %q", method, target, err, raw)
		}
	}
	return hr, out
}

// fuzzCheck holds any response to what every response owes: no 5xx, nothing
// logged at warn or above, Cache-Control and X-Request-Id, a problem+json body on
// every error, a Preference-Applied within maxWait, and the spec wherever the spec
// can route the request (env.validate, which also checks the headers).
func (e *env) fuzzCheck(hr *http.Request, body []byte, got *resp, maxWait time.Duration) {
	e.t.Helper()
	what := hr.Method + " " + hr.URL.RequestURI()
	if got.Status >= 500 {
		e.t.Errorf("%s: status %d: %s", what, got.Status, got.Raw)
	}
	if logged := e.Logs.take(); logged != "" {
		e.t.Errorf("%s: server logged:\n%s", what, logged)
	}
	if got.Status >= 400 && hr.Method != http.MethodHead {
		if ct := got.Header.Get("Content-Type"); ct != "application/problem+json" {
			e.t.Errorf("%s: status %d with Content-Type %q, want application/problem+json", what, got.Status, ct)
		}
		if !strings.HasPrefix(got.Str("type"), "/problems/") || got.Int("status") != int64(got.Status) {
			e.t.Errorf("%s: status %d, problem %s", what, got.Status, got.Raw)
		}
	}
	if got.Status == http.StatusMethodNotAllowed {
		allow := strings.Split(strings.ReplaceAll(got.Header.Get("Allow"), " ", ""), ",")
		switch {
		case got.Header.Get("Allow") == "":
			e.t.Errorf("%s: 405 without Allow", what)
		case (hr.Method == http.MethodHead || hr.Method == http.MethodGet) && hr.URL.Path != "/v1/sessions":
			e.t.Errorf("%s: 405 (Allow %q), but every route but POST /v1/sessions serves GET and HEAD", what, got.Header.Get("Allow"))
		case slices.Contains(allow, http.MethodGet) != slices.Contains(allow, http.MethodHead):
			e.t.Errorf("%s: Allow %q, want HEAD wherever GET is", what, got.Header.Get("Allow"))
		}
	}
	if pa := got.Header.Get("Preference-Applied"); pa != "" {
		n, err := strconv.ParseInt(strings.TrimPrefix(pa, "wait="), 10, 64)
		if err != nil || n < 0 || n > int64(maxWait/time.Second) || hr.Header.Get("Prefer") == "" {
			e.t.Errorf("%s (Prefer %q): Preference-Applied %q, want wait=N with N <= %d", what, hr.Header.Get("Prefer"), pa, maxWait/time.Second)
		}
	}
	if _, _, err := specRouter.FindRoute(specRequest(hr)); err == nil {
		e.validate(hr, body, got)
		return
	}
	if got.Header.Get("Cache-Control") != "no-store" || got.Header.Get("X-Request-Id") == "" {
		e.t.Errorf("%s: Cache-Control %q, X-Request-Id %q", what, got.Header.Get("Cache-Control"), got.Header.Get("X-Request-Id"))
	}
}

// checkKeys fails unless every key of the env lies under <prefix>:{<n>} for a
// lock name n that may have keys.
func (e *env) checkKeys(may func(name string) bool) {
	e.t.Helper()
	for _, k := range e.keys() {
		if k == e.Prefix+":secret" || k == e.Prefix+":secret:fp" {
			continue // the idempotency secret: one per deployment, not per name
		}
		if sessionKeyRE.MatchString(strings.TrimPrefix(k, e.Prefix)) {
			continue // a session (POST /v1/sessions), under the hash of its id
		}
		rest, ok := strings.CutPrefix(k, e.Prefix+":{")
		n, tail, closed := strings.Cut(rest, "}")
		if !ok || !closed || !may(n) || (tail != "" && tail[0] != ':') {
			e.t.Errorf("Redis key %q, want one under %s:{name} of a name this input used", k, e.Prefix)
		}
	}
}

// sessionKeyRE is a session's key after the prefix.
var sessionKeyRE = regexp.MustCompile(`^:s:\{[A-Za-z0-9_-]{22}\}(:h)?$`)

// only is the checkKeys predicate of a single name.
func only(name string) func(string) bool { return func(n string) bool { return n == name } }

// unchanged fails unless Redis holds nothing new for a rejected request: every
// key of after was in before with the same value (keys may have expired since).
func (e *env) unchanged(what string, before, after map[string]string) {
	e.t.Helper()
	for k, v := range after {
		if was, ok := before[k]; !ok || was != v {
			e.t.Errorf("%s: rejected, yet Redis key %s is %s, was %q", what, k, v, was)
		}
	}
}

// fuzzContentTypes are the Content-Types a fuzzed body is sent with ("": none).
var fuzzContentTypes = []string{
	"application/json",
	"",
	"application/json; charset=utf-8",
	"application/merge-patch+json",
	"APPLICATION/JSON",
	"text/plain",
	"application/x-www-form-urlencoded",
	"application/xml",
	"multipart/form-data; boundary=x",
	"application/json; charset",
	"json",
	";",
}

func contentTypeIndex(ct string) uint8 {
	return uint8(max(0, slices.Index(fuzzContentTypes, ct)))
}

// validHeader reports whether Go's client sends v as a header value.
func validHeader(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// bodyHeader is the Content-Type (by index) and Prefer of a fuzzed request.
func bodyHeader(ctype uint8, prefer string) http.Header {
	h := http.Header{}
	if ct := fuzzContentTypes[int(ctype)%len(fuzzContentTypes)]; ct != "" {
		h.Set("Content-Type", ct)
	}
	if prefer != "" {
		h.Set("Prefer", prefer)
	}
	return h
}

// fuzzStatuses are the answers an acquire and a renewal may give.
var (
	acquireStatuses = []int{201, 200, 202, 400, 404, 413, 415, 423, 429}
	renewStatuses   = []int{200, 400, 404, 413, 415}
)

// FuzzAcquireBody sends arbitrary bodies, Content-Types and Prefer headers to
// POST /v1/locks/{name}, on a free lock or (held) one held for 200 ms, so that
// any wait ends soon. "$LEASE" in the body is replaced by the holder's lease
// (an unknown id when free), so that re-entry is within the fuzzer's reach.
func FuzzAcquireBody(f *testing.F) {
	for _, b := range badBodies {
		if b.query == "" {
			f.Add([]byte(b.give), contentTypeIndex(b.header["Content-Type"]), b.header["Prefer"], false)
			f.Add([]byte(b.give), contentTypeIndex(b.header["Content-Type"]), b.header["Prefer"], true)
		}
	}
	for _, s := range []struct {
		body, prefer string
		held         bool
	}{
		{"", "", false},
		{" \n\t ", "", true},
		{`{}`, "", false},
		{`{"ttl_ms":1000,"wait_ms":0,"fair":false,"owner":"w","lease":null}`, "", false},
		{`{"lease":"$LEASE"}`, "", true},
		{`{"lease":"$LEASE","ttl_ms":5000,"owner":"re"}`, "", true},
		{`{"lease":"$LEASE"}`, "", false},
		{`{"wait_ms":50}`, "", true},
		{`{"wait_ms":1000}`, "", true},
		{`{"fair":true}`, "", true},
		{`{"fair":true,"wait_ms":50}`, "", true},
		{`{"ttl_ms":100}`, "wait=0", true},
		{`{}`, "wait=1", true},
		{`{"wait_ms":0}`, "wait=1", true},
		{``, "respond-async, wait=0; x=y", true},
		{``, "wait=9300000000000000", true}, // overflows seconds to ms
		{``, `wait="5"`, false},
		{`{"owner":"\u00e9\ud83d\ude00"}`, "", false},
		{`{"owner":"\xff\xfe"}`, "", false},
		{"{\"owner\":\"\xff\xfe\"}", "", false},
		{"{\"owner\":\"\x1b[31mRED\"}", "", false}, // a raw ESC: no JSON at all
		{`{"owner":"\u001b[31mRED\u001b[0m"}`, "", true},
		{"{\"owner\":\"\xc2\x9b31m\"}", "", false},
		{`{"owner":"\ud83d"}`, "", false},
		{`{"owner":"\ud83d\ude00 \u00a0 ok"}`, "", false},
		{`{"TTL_MS":1000}`, "", false},
		{`{"ttl_ms":1000,"ttl_ms":99}`, "", false},
		{`{"ttl_ms":1e3}`, "", false},
		{`{"ttl_ms":-0}`, "", false},
		{`null`, "", false},
		{`{"fair":null,"wait_ms":null}`, "", false},
		{"\ufeff{}", "", false},
		{`{"a":{"b":[1,{"c":null}]}}`, "", false},
		{`{"shared":true}`, "", false},
		{`{"shared":true}`, "", true},
		{`{"shared":true,"limit":3,"owner":"r"}`, "", false},
		{`{"shared":true,"limit":1,"fair":true}`, "", true},
		{`{"shared":true,"limit":0}`, "", false},
		{`{"shared":false,"limit":2}`, "", false},
		{`{"limit":2}`, "", false},
		{`{"shared":true,"limit":1e9}`, "", false},
		{`{"shared":true,"limit":1000000001}`, "", false},
		{`{"shared":true,"limit":2.5}`, "", false},
		{`{"shared":1}`, "", false},
		{`{"shared":true,"wait_ms":50}`, "", true},
		{`{"lease":"$LEASE","shared":true}`, "", true},
		{`{"lease":"$LEASE","shared":false}`, "", true},
		{`{"lease":"$LEASE","shared":true,"limit":2}`, "", true},
	} {
		f.Add([]byte(s.body), uint8(0), s.prefer, s.held)
	}
	e := fuzzEnv(f, apiLimits)
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, body []byte, ctype uint8, prefer string, held bool) {
		if !validHeader(prefer) {
			t.Skip("Prefer is no header value")
		}
		e := envIn(t, e)
		defer e.flush()
		name := "acq" + strconv.FormatInt(seq.Add(1), 10)
		lease := unknownID()
		if held {
			lease = e.acquire(name, map[string]any{"ttl_ms": 200, "owner": "holder"}).Str("lease")
		}
		body = bytes.ReplaceAll(body, []byte("$LEASE"), []byte(lease))
		before := e.snapshot()
		hr, got := e.fuzzSend(http.MethodPost, "/v1/locks/"+name, body, bodyHeader(ctype, prefer))
		what := "POST " + name + " " + strconv.Quote(string(body))
		e.fuzzCheck(hr, body, got, apiLimits.MaxWait)
		switch {
		case !slices.Contains(acquireStatuses, got.Status):
			t.Errorf("%s: status %d, want one of %v: %s", what, got.Status, acquireStatuses, got.Raw)
		case got.Status == 400 && got.Str("type") != "/problems/invalid-request":
			t.Errorf("%s: 400 %s, want invalid-request", what, got.Raw)
		case !held && (got.Status == 200 || got.Status == 202 || got.Status == 423):
			t.Errorf("%s: status %d on a free lock: %s", what, got.Status, got.Raw)
		}
		if got.Status >= 400 {
			e.unchanged(what, before, e.snapshot())
		}
		if got.Status == http.StatusCreated {
			checkGrant(t, what, body, got)
		}
		e.checkKeys(only(name))
	})
}

// checkGrant holds a 201 to the body it answers: the owner sent (or none) and a
// ttl_ms within the one asked for (or the default).
func checkGrant(t *testing.T, what string, body []byte, got *resp) {
	t.Helper()
	var sent struct {
		Owner  string `json:"owner"`
		TTLms  *int64 `json:"ttl_ms"`
		Shared bool   `json:"shared"`
		Limit  *int64 `json:"limit"`
	}
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &sent) != nil {
		t.Errorf("%s: 201 for a body encoding/json rejects", what)
		return
	}
	for _, r := range sent.Owner {
		if unicode.IsControl(r) || r == utf8.RuneError { // what an invalid byte or a lone surrogate decodes to
			t.Errorf("%s: 201 for an owner with %U, which is no label", what, r)
		}
	}
	ttl := apiLimits.DefaultTTL.Milliseconds()
	if sent.TTLms != nil {
		ttl = *sent.TTLms
	}
	if got.Str("owner") != sent.Owner || got.Int("ttl_ms") <= 0 || got.Int("ttl_ms") > ttl {
		t.Errorf("%s: owner %q, ttl_ms %d; want owner %q, ttl_ms in (0, %d]", what, got.Str("owner"), got.Int("ttl_ms"), sent.Owner, ttl)
	}
	limit, hasLimit := got.Body["limit"]
	switch {
	case got.Bool("shared") != sent.Shared:
		t.Errorf("%s: shared %v, want %v", what, got.Bool("shared"), sent.Shared)
	case !sent.Shared && hasLimit:
		t.Errorf("%s: an exclusive lease with limit %v", what, limit)
	case sent.Shared && sent.Limit == nil && (!hasLimit || limit != nil):
		t.Errorf("%s: a shared lease without a limit: limit %v, want null", what, limit)
	case sent.Shared && sent.Limit != nil && got.Int("limit") != *sent.Limit:
		t.Errorf("%s: limit %v, want %d", what, limit, *sent.Limit)
	}
}

// FuzzRenewBody sends arbitrary bodies and Content-Types to PATCH on a held lease,
// or (released) one released just before.
func FuzzRenewBody(f *testing.F) {
	for _, b := range badBodies {
		if b.query == "" && !b.postOnly {
			f.Add([]byte(b.give), contentTypeIndex(b.header["Content-Type"]), false)
		}
	}
	for _, s := range []struct {
		body     string
		released bool
	}{
		{"", false},
		{"", true},
		{`{}`, false},
		{`{"ttl_ms":5000}`, false},
		{`{"ttl_ms":5000}`, true},
		{`{"ttl_ms":100}`, false},
		{`{"ttl_ms":86400000}`, false},
		{`{"ttl_ms":null}`, false},
		{`{"ttl_ms":1000}`, true},
		{`{"ttl_ms":99}`, true},
		{`{"wait_ms":10}`, false},
		{`{"fair":true}`, false},
	} {
		f.Add([]byte(s.body), uint8(0), s.released)
	}
	e := fuzzEnv(f, apiLimits)
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, body []byte, ctype uint8, released bool) {
		e := envIn(t, e)
		defer e.flush()
		name := "ren" + strconv.FormatInt(seq.Add(1), 10)
		lease := e.acquire(name, map[string]any{"ttl_ms": 60000}).Str("url")
		if released {
			wantStatus(t, e.do(req{Method: http.MethodDelete, Path: lease}), http.StatusOK, "")
		}
		before := e.snapshot()
		hr, got := e.fuzzSend(http.MethodPatch, lease, body, bodyHeader(ctype, ""))
		what := "PATCH " + strconv.Quote(string(body))
		e.fuzzCheck(hr, body, got, apiLimits.MaxWait)
		switch {
		case !slices.Contains(renewStatuses, got.Status):
			t.Errorf("%s: status %d, want one of %v: %s", what, got.Status, renewStatuses, got.Raw)
		case got.Status == 400 && got.Str("type") != "/problems/invalid-request":
			t.Errorf("%s: 400 %s, want invalid-request", what, got.Raw)
		case released && got.Status == 200:
			t.Errorf("%s: 200 on a released lease: %s", what, got.Raw)
		case !released && got.Status == 404:
			t.Errorf("%s: 404 on a held lease: %s", what, got.Raw)
		}
		if got.Status >= 400 {
			e.unchanged(what, before, e.snapshot())
		}
		e.checkKeys(only(name))
	})
}
