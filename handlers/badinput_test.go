package handlers_test

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every rejected request must answer its problem kind and leave Redis exactly as
// it was: each case compares a snapshot of the env's keys (values, not TTLs)
// taken before and after it.

// problemWant is what a rejected request must answer.
type problemWant struct {
	status  int
	kind    string
	field   string   // invalid-request: the key the errors object must hold
	mention string   // text the detail or one of the errors messages must contain
	allow   []string // 405: the methods Allow must list
}

// badCase is one request that must be rejected.
type badCase struct {
	name string
	give req
	want problemWant
}

// badFixture is one env with locks in every state a rejected request can meet.
type badFixture struct {
	e        *env
	lease    string // holds "held"
	released string // a lease of "held" that was released
	other    string // holds "other"
	ticket   string // queued on "queued" (which is held)
	gone     string // a cancelled ticket of "queued"
}

func newBadFixture(t *testing.T) *badFixture {
	t.Helper()
	// Tickets must not expire in the middle of a case and change the snapshot.
	e := newEnv(t, envOptions{TicketTTL: 5 * time.Minute})
	f := &badFixture{e: e}
	old := e.acquire("held", map[string]any{"ttl_ms": 300000})
	f.released = old.Str("lease")
	wantStatus(t, e.do(req{Method: "DELETE", Path: old.Str("url")}), http.StatusOK, "")
	f.lease = e.acquire("held", map[string]any{"ttl_ms": 300000, "owner": "holder"}).Str("lease")
	f.other = e.acquire("other", map[string]any{"ttl_ms": 300000}).Str("lease")
	e.acquire("queued", map[string]any{"ttl_ms": 300000})
	live := e.do(req{Method: "POST", Path: "/v1/locks/queued", Body: map[string]any{"fair": true}})
	wantStatus(t, live, http.StatusAccepted, "")
	f.ticket = live.Str("ticket")
	cancelled := e.do(req{Method: "POST", Path: "/v1/locks/queued", Body: map[string]any{"fair": true}})
	wantStatus(t, cancelled, http.StatusAccepted, "")
	f.gone = cancelled.Str("ticket")
	wantStatus(t, e.do(req{Method: "DELETE", Path: cancelled.Str("url")}), http.StatusNoContent, "")
	return f
}

// envIn is e reporting to t, for use inside a subtest.
func envIn(t *testing.T, e *env) *env {
	c := *e
	c.t = t
	return &c
}

// runBad sends each case on its own subtest and checks its problem and that Redis
// did not change.
func runBad(t *testing.T, e *env, cases []badCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			before := e.snapshot()
			got := e.do(tt.give)
			if tt.give.Method == http.MethodHead {
				checkHeadProblem(t, got, tt.want)
			} else {
				checkProblem(t, got, tt.want)
			}
			if after := e.snapshot(); !sameKeys(before, after) {
				t.Errorf("Redis after %s %s:\n%v\nwant it unchanged:\n%v", tt.give.Method, tt.give.Path, after, before)
			}
		})
	}
}

// checkProblem checks status, kind, the errors field, the mention and Allow.
func checkProblem(t *testing.T, got *resp, want problemWant) {
	t.Helper()
	wantStatus(t, got, want.status, want.kind)
	if got.Str("title") == "" || got.Str("detail") == "" {
		t.Errorf("problem without title or detail: %s", got.Raw)
	}
	for _, leak := range []string{"redis", "lua", "goroutine", ".go:", "store:"} {
		if strings.Contains(strings.ToLower(string(got.Raw)), leak) {
			t.Errorf("problem %s mentions %q, want no internals", got.Raw, leak)
		}
	}
	errs, _ := got.Body["errors"].(map[string]any)
	if want.field != "" {
		if _, ok := errs[want.field]; !ok {
			t.Errorf("errors %v, want a message for %q: %s", errs, want.field, got.Raw)
		}
	}
	if want.mention != "" {
		text := got.Str("detail")
		for _, m := range errs {
			s, _ := m.(string)
			text += "\n" + s
		}
		if !strings.Contains(text, want.mention) {
			t.Errorf("detail and errors %q, want them to mention %q", text, want.mention)
		}
	}
	if want.allow != nil {
		var allow []string
		for _, m := range strings.Split(strings.Join(got.Header.Values("Allow"), ","), ",") {
			if m = strings.TrimSpace(m); m != "" {
				allow = append(allow, m)
			}
		}
		slices.Sort(allow)
		w := slices.Sorted(slices.Values(want.allow))
		if !slices.Equal(allow, w) {
			t.Errorf("Allow %v, want %v", allow, w)
		}
	}
}

// checkHeadProblem checks the answer to a rejected HEAD: the GET's status and
// problem+json Content-Type, and no body, so no kind to check.
func checkHeadProblem(t *testing.T, got *resp, want problemWant) {
	t.Helper()
	wantStatus(t, got, want.status, "")
	if ct := got.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if len(got.Raw) > 0 {
		t.Errorf("HEAD answered with a body: %q", got.Raw)
	}
}

// unknownID is a well-formed id that was never issued.
func unknownID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// bodyOf is a JSON object of exactly n bytes: {"owner":"aaa…"}.
func bodyOf(n int) string {
	return `{"owner":"` + strings.Repeat("a", n-len(`{"owner":""}`)) + `"}`
}

func invalidReq(field string) problemWant {
	return problemWant{status: http.StatusBadRequest, kind: "invalid-request", field: field}
}

// bodyCase is a bad body for both POST /v1/locks/{name} and PATCH of a lease,
// unless postOnly: fields only POST takes are unknown fields to PATCH, so both
// name the same field.
type bodyCase struct {
	name     string
	give     string // the body
	query    string
	header   map[string]string
	want     problemWant
	postOnly bool
}

var badBodies = []bodyCase{
	{name: "malformed truncated", give: `{"ttl_ms":1000`, want: invalidReq("")},
	{name: "malformed unquoted key", give: `{ttl_ms:1000}`, want: invalidReq("")},
	{name: "malformed trailing comma", give: `{"ttl_ms":1000,}`, want: invalidReq("")},
	{name: "trailing object", give: `{"ttl_ms":1000} {}`, want: invalidReq("")},
	{name: "trailing garbage", give: `{"ttl_ms":1000}x`, want: invalidReq("")},
	{name: "array", give: `[]`, want: invalidReq("")},
	{name: "array of object", give: `[{"ttl_ms":1000}]`, want: invalidReq("")},
	{name: "string", give: `"ttl_ms"`, want: invalidReq("")},
	{name: "number", give: `1000`, want: invalidReq("")},
	{name: "ttl_ms as string", give: `{"ttl_ms":"1000"}`, want: invalidReq("ttl_ms")},
	{name: "ttl_ms as float", give: `{"ttl_ms":1.5}`, want: invalidReq("ttl_ms")},
	{name: "ttl_ms huge exponent", give: `{"ttl_ms":1e30}`, want: invalidReq("ttl_ms")},
	{name: "ttl_ms over int64", give: `{"ttl_ms":99999999999999999999}`, want: invalidReq("ttl_ms")},
	{name: "ttl_ms below min", give: `{"ttl_ms":99}`, want: problemWant{status: 400, kind: "invalid-request", field: "ttl_ms", mention: "100"}},
	{name: "ttl_ms above max", give: `{"ttl_ms":86400001}`, want: problemWant{status: 400, kind: "invalid-request", field: "ttl_ms", mention: "86400000"}},
	{name: "ttl_ms zero", give: `{"ttl_ms":0}`, want: invalidReq("ttl_ms")},
	{name: "ttl_ms negative", give: `{"ttl_ms":-1}`, want: invalidReq("ttl_ms")},
	{name: "unknown field ttl", give: `{"ttl":1000}`, want: invalidReq("ttl")},
	{name: "unknown field among known", give: `{"ttl_ms":1000,"wiat_ms":5}`, want: invalidReq("wiat_ms")},
	{name: "fair as string", give: `{"fair":"true"}`, want: invalidReq("fair")},
	{name: "owner as number", give: `{"owner":7}`, want: invalidReq("owner")},
	{name: "lease as number", give: `{"lease":7}`, want: invalidReq("lease")},
	{name: "wait_ms as string", give: `{"wait_ms":"5"}`, want: invalidReq("wait_ms")},
	{name: "wait_ms negative", give: `{"wait_ms":-1}`, want: invalidReq("wait_ms")},
	{name: "wait_ms above max", give: `{"wait_ms":60001}`, postOnly: true,
		want: problemWant{status: 400, kind: "invalid-request", field: "wait_ms", mention: "60000"}},
	{name: "owner of 129 characters", give: `{"owner":"` + strings.Repeat("o", 129) + `"}`, want: invalidReq("owner")},
	{name: "owner of 129 runes", give: `{"owner":"` + strings.Repeat("é", 129) + `"}`, want: invalidReq("owner")},
	{name: "owner with NUL", give: `{"owner":"a\u0000b"}`, want: invalidReq("owner")},
	{name: "owner with newline", give: `{"owner":"a\nb"}`, want: invalidReq("owner")},
	{name: "owner with tab", give: `{"owner":"a\tb"}`, want: invalidReq("owner")},
	{name: "owner with ANSI escape", give: `{"owner":"\u001b[31mRED"}`, want: invalidReq("owner")},
	{name: "owner with unit separator", give: `{"owner":"\u001f"}`, want: invalidReq("owner")},
	{name: "owner with DEL", give: `{"owner":"a\u007fb"}`, want: invalidReq("owner")},
	{name: "owner with raw DEL", give: "{\"owner\":\"a\x7fb\"}", want: invalidReq("owner")},
	{name: "owner with C1 NEL", give: `{"owner":"a\u0085b"}`, want: invalidReq("owner")},
	{name: "owner with raw C1 CSI", give: "{\"owner\":\"\xc2\x9b31mRED\"}", want: invalidReq("owner")},
	{name: "owner with C1 APC", give: `{"owner":"\u009f"}`, want: invalidReq("owner")},
	{name: "owner with C1 PAD", give: `{"owner":"\u0080"}`, want: invalidReq("owner")},
	{name: "owner with invalid UTF-8", give: "{\"owner\":\"a\xffb\"}", want: invalidReq("owner")},
	{name: "owner with truncated UTF-8", give: "{\"owner\":\"caf\xc3\"}", want: invalidReq("owner")},
	{name: "owner with a lone surrogate", give: `{"owner":"a\ud800b"}`, want: invalidReq("owner")},
	{name: "owner with U+FFFD", give: `{"owner":"a\ufffdb"}`, want: invalidReq("owner")},
	{name: "empty lease", give: `{"lease":""}`, want: invalidReq("lease")},
	{name: "lease with fair", give: `{"lease":"` + strings.Repeat("A", 22) + `","fair":true}`, postOnly: true, want: invalidReq("fair")},
	{name: "Prefer wait above max", give: `{}`, header: map[string]string{"Prefer": "wait=61"}, postOnly: true,
		want: problemWant{status: 400, kind: "invalid-request", mention: "60"}},
	{name: "Prefer wait not a number", give: `{}`, header: map[string]string{"Prefer": "wait=abc"}, postOnly: true, want: invalidReq("Prefer")},
	{name: "Prefer wait negative", give: `{}`, header: map[string]string{"Prefer": "respond-async, wait=-1"}, postOnly: true, want: invalidReq("Prefer")},
	{name: "unknown query parameter", give: `{}`, query: "?wait=5", want: invalidReq("wait")},
	{name: "body field as query parameter", give: `{}`, query: "?ttl_ms=1000", want: invalidReq("ttl_ms")},
	{name: "body of exactly 16 KiB", give: bodyOf(16 << 10), want: invalidReq("owner")},
	{name: "body of 16 KiB + 1", give: bodyOf(16<<10 + 1), want: problemWant{status: 413, kind: "body-too-large"}},
	{name: "body of 64 KiB", give: bodyOf(64 << 10), want: problemWant{status: 413, kind: "body-too-large"}},
	{name: "text/plain", give: `{"ttl_ms":1000}`, header: map[string]string{"Content-Type": "text/plain"},
		want: problemWant{status: 415, kind: "unsupported-media-type"}},
	{name: "form", give: `ttl_ms=1000`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
		want: problemWant{status: 415, kind: "unsupported-media-type"}},
	{name: "xml", give: `<ttl_ms>1000</ttl_ms>`, header: map[string]string{"Content-Type": "application/xml"},
		want: problemWant{status: 415, kind: "unsupported-media-type"}},
}

func TestBadBody(t *testing.T) {
	f := newBadFixture(t)
	var cases []badCase
	for _, b := range badBodies {
		cases = append(cases, badCase{
			name: "POST free/" + b.name,
			give: req{Method: "POST", Path: "/v1/locks/free" + b.query, Body: b.give, Header: b.header},
			want: b.want,
		})
		cases = append(cases, badCase{
			name: "POST held/" + b.name,
			give: req{Method: "POST", Path: "/v1/locks/held" + b.query, Body: b.give, Header: b.header},
			want: b.want,
		})
		if !b.postOnly {
			cases = append(cases, badCase{
				name: "PATCH/" + b.name,
				give: req{Method: "PATCH", Path: "/v1/locks/held/leases/" + f.lease + b.query, Body: b.give, Header: b.header},
				want: b.want,
			})
		}
	}
	runBad(t, f.e, cases)
}

func TestBadLockName(t *testing.T) {
	f := newBadFixture(t)
	names := []struct{ label, give string }{
		{"blank", "%20"},
		{"space", "a%20b"},
		{"open brace", "a{b"},
		{"close brace", "a}b"},
		{"hash tag", "{held}"},
		{"encoded slash", "held%2Fx"},
		{"lone encoded slash", "%2F"},
		{"NUL", "held%00"},
		{"newline", "held%0A"},
		{"percent", "a%25b"},
		{"plus", "a+b"},
		{"star", "held*"},
		{"encoded unicode", "caf%C3%A9"},
		{"unicode", "日本"},
		{"201 characters", strings.Repeat("n", 201)},
		{"dot", "."},
		{"dot-dot", ".."},
		{"encoded dot", "%2E"},
		{"encoded dot-dot", "%2E%2E"},
		{"half-encoded dot-dot", ".%2e"},
	}
	routes := []struct {
		label, method, suffix string
		body                  any
	}{
		{"acquire", "POST", "", map[string]any{"ttl_ms": 1000}},
		{"state", "GET", "", nil},
		{"state HEAD", "HEAD", "", nil},
		{"force", "DELETE", "?force=true", nil},
		{"get lease", "GET", "/leases/" + f.lease, nil},
		{"get lease HEAD", "HEAD", "/leases/" + f.lease, nil},
		{"renew", "PATCH", "/leases/" + f.lease, map[string]any{"ttl_ms": 1000}},
		{"release", "DELETE", "/leases/" + f.lease, nil},
		{"poll", "GET", "/tickets/" + f.ticket, nil},
		{"poll HEAD", "HEAD", "/tickets/" + f.ticket, nil},
		{"cancel", "DELETE", "/tickets/" + f.ticket, nil},
	}
	want := problemWant{status: http.StatusBadRequest, kind: "invalid-name"}
	var cases []badCase
	for _, r := range routes {
		for _, n := range names {
			cases = append(cases, badCase{
				name: r.label + "/" + n.label,
				give: req{Method: r.method, Path: "/v1/locks/" + n.give + r.suffix, Body: r.body},
				want: want,
			})
		}
	}
	runBad(t, f.e, cases)
}

// TestDotSegmentName: "." and ".." are dot-segments (RFC 3986, 5.2.4): curl,
// browsers and most HTTP libraries remove them from a path before sending it, so
// a lock of that name would have lease URLs its holder cannot reach. They are
// invalid names. Each request goes on a connection of its own, its request line
// written byte by byte, so nothing between the test and the server can normalise
// the path.
func TestDotSegmentName(t *testing.T) {
	f := newBadFixture(t)
	var targets []struct{ method, target string }
	for _, name := range []string{".", ".."} {
		for _, r := range []struct{ method, suffix string }{
			{"POST", ""},
			{"GET", ""},
			{"DELETE", "?force=true"},
			{"GET", "/leases/" + f.lease},
			{"PATCH", "/leases/" + f.lease},
			{"DELETE", "/leases/" + f.lease},
			{"GET", "/tickets/" + f.ticket},
			{"DELETE", "/tickets/" + f.ticket},
		} {
			targets = append(targets, struct{ method, target string }{r.method, "/v1/locks/" + name + r.suffix})
		}
	}
	for _, tt := range targets {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			e := envIn(t, f.e)
			before := e.snapshot()
			checkProblem(t, e.rawDo(tt.method, tt.target), problemWant{status: http.StatusBadRequest, kind: "invalid-name"})
			if after := e.snapshot(); !sameKeys(before, after) {
				t.Errorf("Redis after %s %s:\n%v\nwant it unchanged:\n%v", tt.method, tt.target, after, before)
			}
		})
	}
}

// TestEmptyLockName: below /v1/locks/ an empty name still routes, and is an
// invalid name like any other (/v1/locks/ itself is no route: TestBadRoute).
func TestEmptyLockName(t *testing.T) {
	f := newBadFixture(t)
	want := problemWant{status: http.StatusBadRequest, kind: "invalid-name"}
	runBad(t, f.e, []badCase{
		{name: "get lease", give: req{Method: "GET", Path: "/v1/locks//leases/" + f.lease}, want: want},
		{name: "renew", give: req{Method: "PATCH", Path: "/v1/locks//leases/" + f.lease, Body: map[string]any{"ttl_ms": 1000}}, want: want},
		{name: "release", give: req{Method: "DELETE", Path: "/v1/locks//leases/" + f.lease}, want: want},
		{name: "poll", give: req{Method: "GET", Path: "/v1/locks//tickets/" + f.ticket}, want: want},
		{name: "cancel", give: req{Method: "DELETE", Path: "/v1/locks//tickets/" + f.ticket}, want: want},
	})
}

func TestBadLease(t *testing.T) {
	f := newBadFixture(t)
	notHeld := problemWant{status: http.StatusNotFound, kind: "lease-not-held"}
	leases := []struct{ label, path, id string }{
		{"unknown", "held", unknownID()},
		{"malformed short", "held", "x"},
		{"malformed characters", "held", "not*a*lease*at*all*not*a*lease"},
		{"malformed long", "held", strings.Repeat("A", 65)},
		{"released", "held", f.released},
		{"of another lock", "held", f.other},
		{"on a free lock", "free", f.lease},
	}
	var cases []badCase
	for _, l := range leases {
		url := "/v1/locks/" + l.path + "/leases/" + l.id
		cases = append(cases,
			badCase{name: "GET/" + l.label, give: req{Method: "GET", Path: url}, want: notHeld},
			badCase{name: "HEAD/" + l.label, give: req{Method: "HEAD", Path: url}, want: notHeld},
			badCase{name: "PATCH/" + l.label, give: req{Method: "PATCH", Path: url, Body: map[string]any{"ttl_ms": 5000}}, want: notHeld},
			badCase{name: "PATCH empty body/" + l.label, give: req{Method: "PATCH", Path: url}, want: notHeld},
			badCase{name: "DELETE/" + l.label, give: req{Method: "DELETE", Path: url}, want: notHeld},
			badCase{name: "re-entry/" + l.label, give: req{Method: "POST", Path: "/v1/locks/" + l.path,
				Body: map[string]any{"lease": l.id, "ttl_ms": 5000}}, want: notHeld},
		)
	}
	held := problemWant{status: http.StatusLocked, kind: "lock-held"}
	cases = append(cases,
		badCase{name: "423/no wait", give: req{Method: "POST", Path: "/v1/locks/held"}, want: held},
		badCase{name: "423/wait_ms elapsed", give: req{Method: "POST", Path: "/v1/locks/held", Body: map[string]any{"wait_ms": 100}}, want: held},
		badCase{name: "423/Prefer wait=0", give: req{Method: "POST", Path: "/v1/locks/held", Header: map[string]string{"Prefer": "wait=0"}}, want: held},
		badCase{name: "423/queue ahead", give: req{Method: "POST", Path: "/v1/locks/queued", Body: map[string]any{"owner": "late"}}, want: held},
	)
	runBad(t, f.e, cases)
}

func TestBadQuery(t *testing.T) {
	f := newBadFixture(t)
	lease := "/v1/locks/held/leases/" + f.lease
	ticket := "/v1/locks/queued/tickets/" + f.ticket
	waitMax := problemWant{status: 400, kind: "invalid-request", field: "wait_ms", mention: "60000"}
	preferMax := problemWant{status: 400, kind: "invalid-request", mention: "60"}
	prefer := func(v string) map[string]string { return map[string]string{"Prefer": v} }
	runBad(t, f.e, []badCase{
		{name: "state/wait_ms not a number", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=abc"}, want: invalidReq("wait_ms")},
		{name: "state/wait_ms negative", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=-1"}, want: invalidReq("wait_ms")},
		{name: "state/wait_ms float", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=1.5"}, want: invalidReq("wait_ms")},
		{name: "state/wait_ms empty", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms="}, want: invalidReq("wait_ms")},
		{name: "state/wait_ms above max", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=60001"}, want: waitMax},
		{name: "state/fence negative", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=10&fence=-1"}, want: invalidReq("fence")},
		{name: "state/fence not a number", give: req{Method: "GET", Path: "/v1/locks/held?fence=abc"}, want: invalidReq("fence")},
		{name: "state/unknown parameter", give: req{Method: "GET", Path: "/v1/locks/held?wait=5"}, want: invalidReq("wait")},
		{name: "state/unknown among known", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=10&fence=1&owner=x"}, want: invalidReq("owner")},
		{name: "state/malformed query", give: req{Method: "GET", Path: "/v1/locks/held?wait_ms=%zz"}, want: invalidReq("")},
		{name: "state/Prefer wait above max", give: req{Method: "GET", Path: "/v1/locks/held", Header: prefer("wait=61")}, want: preferMax},
		{name: "state/Prefer wait not a number", give: req{Method: "GET", Path: "/v1/locks/held", Header: prefer("wait=abc")}, want: invalidReq("Prefer")},
		{name: "state HEAD/wait_ms above max", give: req{Method: "HEAD", Path: "/v1/locks/held?wait_ms=60001"}, want: waitMax},
		{name: "state HEAD/unknown parameter", give: req{Method: "HEAD", Path: "/v1/locks/held?wait=5"}, want: invalidReq("wait")},
		{name: "get lease HEAD/unknown parameter", give: req{Method: "HEAD", Path: lease + "?wait=5"}, want: invalidReq("wait")},
		{name: "poll HEAD/wait_ms not a number", give: req{Method: "HEAD", Path: ticket + "?wait_ms=abc"}, want: invalidReq("wait_ms")},
		{name: "get lease/unknown parameter", give: req{Method: "GET", Path: lease + "?wait=5"}, want: invalidReq("wait")},
		{name: "release/unknown parameter", give: req{Method: "DELETE", Path: lease + "?force=true"}, want: invalidReq("force")},
		{name: "poll/wait_ms not a number", give: req{Method: "GET", Path: ticket + "?wait_ms=abc"}, want: invalidReq("wait_ms")},
		{name: "poll/wait_ms above max", give: req{Method: "GET", Path: ticket + "?wait_ms=60001"}, want: waitMax},
		{name: "poll/fence is not a poll parameter", give: req{Method: "GET", Path: ticket + "?fence=1"}, want: invalidReq("fence")},
		{name: "poll/Prefer wait above max", give: req{Method: "GET", Path: ticket, Header: prefer("wait=61")}, want: preferMax},
		{name: "cancel/unknown parameter", give: req{Method: "DELETE", Path: ticket + "?wait_ms=5"}, want: invalidReq("wait_ms")},
		{name: "force/missing", give: req{Method: "DELETE", Path: "/v1/locks/held"}, want: invalidReq("force")},
		{name: "force/yes", give: req{Method: "DELETE", Path: "/v1/locks/held?force=yes"}, want: invalidReq("force")},
		{name: "force/TRUE", give: req{Method: "DELETE", Path: "/v1/locks/held?force=TRUE"}, want: invalidReq("force")},
		{name: "force/1", give: req{Method: "DELETE", Path: "/v1/locks/held?force=1"}, want: invalidReq("force")},
		{name: "force/empty", give: req{Method: "DELETE", Path: "/v1/locks/held?force="}, want: invalidReq("force")},
		{name: "force/unknown parameter", give: req{Method: "DELETE", Path: "/v1/locks/held?force=true&wait=5"}, want: invalidReq("wait")},
	})
}

func TestBadRoute(t *testing.T) {
	f := newBadFixture(t)
	notFound := problemWant{status: http.StatusNotFound, kind: "not-found"}
	notAllowed := func(allow ...string) problemWant {
		return problemWant{status: http.StatusMethodNotAllowed, kind: "method-not-allowed", allow: allow}
	}
	lease := "/v1/locks/held/leases/" + f.lease
	ticket := "/v1/locks/queued/tickets/" + f.ticket
	runBad(t, f.e, []badCase{
		{name: "404/other version", give: req{Method: "GET", Path: "/v2/locks/held"}, want: notFound},
		{name: "405/collection", give: req{Method: "PUT", Path: "/v1/locks", Body: map[string]any{}}, want: notAllowed("GET", "HEAD")},
		{name: "405/POST collection", give: req{Method: "POST", Path: "/v1/locks", Body: map[string]any{}}, want: notAllowed("GET", "HEAD")},
		{name: "404/collection slash", give: req{Method: "POST", Path: "/v1/locks/", Body: map[string]any{}}, want: notFound},
		{name: "404/leases collection", give: req{Method: "GET", Path: "/v1/locks/held/leases"}, want: notFound},
		{name: "404/unknown sub-resource", give: req{Method: "GET", Path: "/v1/locks/held/owner"}, want: notFound},
		{name: "404/below a lease", give: req{Method: "GET", Path: lease + "/x"}, want: notFound},
		{name: "405/PUT lock", give: req{Method: "PUT", Path: "/v1/locks/held", Body: map[string]any{}}, want: notAllowed("GET", "HEAD", "POST", "DELETE")},
		{name: "405/PATCH lock", give: req{Method: "PATCH", Path: "/v1/locks/held", Body: map[string]any{}}, want: notAllowed("GET", "HEAD", "POST", "DELETE")},
		{name: "405/PUT lease", give: req{Method: "PUT", Path: lease}, want: notAllowed("GET", "HEAD", "PATCH", "DELETE")},
		{name: "405/POST lease", give: req{Method: "POST", Path: lease, Body: map[string]any{}}, want: notAllowed("GET", "HEAD", "PATCH", "DELETE")},
		{name: "405/POST ticket", give: req{Method: "POST", Path: ticket}, want: notAllowed("GET", "HEAD", "DELETE")},
		{name: "405/PATCH ticket", give: req{Method: "PATCH", Path: ticket}, want: notAllowed("GET", "HEAD", "DELETE")},
		{name: "405/POST livez", give: req{Method: "POST", Path: "/livez"}, want: notAllowed("GET", "HEAD")},
		{name: "405/DELETE metrics", give: req{Method: "DELETE", Path: "/metrics"}, want: notAllowed("GET", "HEAD")},
		{name: "405/OPTIONS lock", give: req{Method: "OPTIONS", Path: "/v1/locks/held"}, want: notAllowed("GET", "HEAD", "POST", "DELETE")},
		{name: "405/made-up method on a lock", give: req{Method: "FROB", Path: "/v1/locks/held"}, want: notAllowed("GET", "HEAD", "POST", "DELETE")},
		{name: "405/made-up method on a ticket", give: req{Method: "FROB", Path: ticket}, want: notAllowed("GET", "HEAD", "DELETE")},
		{name: "404/made-up method on no route", give: req{Method: "FROB", Path: "/nowhere"}, want: notFound},
		{name: "404/PUT on no route", give: req{Method: "PUT", Path: "/v1/locks/held/leases"}, want: notFound},
	})
}

func TestTicketGone(t *testing.T) {
	f := newBadFixture(t)
	gone := problemWant{status: http.StatusGone, kind: "ticket-gone"}
	tickets := []struct{ label, path, id string }{
		{"unknown", "queued", unknownID()},
		{"malformed", "queued", "x"},
		{"cancelled", "queued", f.gone},
		{"of another lock", "held", f.ticket},
		{"a lease id", "held", f.lease},
	}
	var cases []badCase
	for _, tk := range tickets {
		url := "/v1/locks/" + tk.path + "/tickets/" + tk.id
		cases = append(cases,
			badCase{name: "GET/" + tk.label, give: req{Method: "GET", Path: url}, want: gone},
			badCase{name: "GET with wait/" + tk.label, give: req{Method: "GET", Path: url + "?wait_ms=5000"}, want: gone},
			badCase{name: "HEAD with wait/" + tk.label, give: req{Method: "HEAD", Path: url + "?wait_ms=5000"}, want: gone},
			badCase{name: "DELETE/" + tk.label, give: req{Method: "DELETE", Path: url}, want: gone},
		)
	}
	runBad(t, f.e, cases)
}

// TestBadInputBounds sends the values just inside each bound: they are granted.
func TestBadInputBounds(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name string
		give req
		want int
	}{
		{"name of 200 characters", req{Method: "POST", Path: "/v1/locks/" + strings.Repeat("n", 200)}, http.StatusCreated},
		{"every allowed character", req{Method: "POST", Path: "/v1/locks/AZaz09._:-"}, http.StatusCreated},
		{"three dots", req{Method: "POST", Path: "/v1/locks/..."}, http.StatusCreated},
		{"leading dot", req{Method: "POST", Path: "/v1/locks/.a"}, http.StatusCreated},
		{"trailing dots", req{Method: "POST", Path: "/v1/locks/a.."}, http.StatusCreated},
		{"owner of 128 characters", req{Method: "POST", Path: "/v1/locks/o128", Body: map[string]any{"owner": strings.Repeat("o", 128)}}, http.StatusCreated},
		{"owner of 128 runes", req{Method: "POST", Path: "/v1/locks/r128", Body: map[string]any{"owner": strings.Repeat("é", 128)}}, http.StatusCreated},
		{"owner of printable text", req{Method: "POST", Path: "/v1/locks/print", Body: map[string]any{"owner": "worker 3 (café, 日本, 😀) \u00a0~"}}, http.StatusCreated},
		{"owner of one character past C1", req{Method: "POST", Path: "/v1/locks/nbsp", Body: map[string]any{"owner": "\u00a0"}}, http.StatusCreated},
		{"ttl_ms at min", req{Method: "POST", Path: "/v1/locks/tmin", Body: map[string]any{"ttl_ms": 100}}, http.StatusCreated},
		{"ttl_ms at max", req{Method: "POST", Path: "/v1/locks/tmax", Body: map[string]any{"ttl_ms": 86400000}}, http.StatusCreated},
		{"wait_ms at max on a free lock", req{Method: "POST", Path: "/v1/locks/wmax", Body: map[string]any{"wait_ms": 60000}}, http.StatusCreated},
		{"Prefer wait at max on a free lock", req{Method: "POST", Path: "/v1/locks/pmax", Header: map[string]string{"Prefer": "wait=60"}}, http.StatusCreated},
		{"body of whitespace", req{Method: "POST", Path: "/v1/locks/ws", Body: " \n\t "}, http.StatusCreated},
		{"empty body as text/plain", req{Method: "POST", Path: "/v1/locks/plain", Body: "", Header: map[string]string{"Content-Type": "text/plain"}}, http.StatusCreated},
		{"JSON with charset", req{Method: "POST", Path: "/v1/locks/charset", Body: `{"ttl_ms":1000}`,
			Header: map[string]string{"Content-Type": "application/json; charset=utf-8"}}, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			got := e.do(tt.give)
			wantStatus(t, got, tt.want, "")
			if b, ok := tt.give.Body.(map[string]any); ok && b["owner"] != nil && got.Str("owner") != b["owner"] {
				t.Errorf("owner %q, want %q", got.Str("owner"), b["owner"])
			}
			if got.Status == http.StatusCreated {
				wantStatus(t, e.do(req{Method: "DELETE", Path: got.Str("url")}), http.StatusOK, "")
			}
		})
	}
}

func TestTooManyWaiters(t *testing.T) {
	e := newEnv(t, envOptions{MaxWaiters: 1, TicketTTL: 5 * time.Minute})
	holder := e.acquire("busy", map[string]any{"ttl_ms": 60000})
	e.acquire("queued", map[string]any{"ttl_ms": 60000})
	tk := e.do(req{Method: "POST", Path: "/v1/locks/queued", Body: map[string]any{"fair": true}})
	wantStatus(t, tk, http.StatusAccepted, "")

	first := e.parkWaiter("busy", map[string]any{"wait_ms": 20000})

	tests := []struct {
		name string
		give req
		want problemWant
	}{
		{"acquire with wait_ms", req{Method: "POST", Path: "/v1/locks/busy", Body: map[string]any{"wait_ms": 1000}},
			problemWant{status: 429, kind: "too-many-waiters"}},
		{"acquire with Prefer wait", req{Method: "POST", Path: "/v1/locks/busy", Header: map[string]string{"Prefer": "wait=1"}},
			problemWant{status: 429, kind: "too-many-waiters"}},
		{"fair acquire with wait_ms", req{Method: "POST", Path: "/v1/locks/busy", Body: map[string]any{"wait_ms": 1000, "fair": true}},
			problemWant{status: 429, kind: "too-many-waiters"}},
		{"watch", req{Method: "GET", Path: "/v1/locks/busy?wait_ms=1000"},
			problemWant{status: 429, kind: "too-many-waiters"}},
		{"ticket poll", req{Method: "GET", Path: tk.Str("url") + "?wait_ms=1000"},
			problemWant{status: 429, kind: "too-many-waiters"}},
		{"no wait is not limited", req{Method: "POST", Path: "/v1/locks/busy"},
			problemWant{status: 423, kind: "lock-held"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			before := e.snapshot()
			got := e.do(tt.give)
			checkProblem(t, got, tt.want)
			if n, err := strconv.Atoi(got.Header.Get("Retry-After")); err != nil || n < 1 {
				t.Errorf("Retry-After %q, want whole seconds >= 1", got.Header.Get("Retry-After"))
			}
			if after := e.snapshot(); !sameKeys(before, after) {
				t.Errorf("Redis after %s:\n%v\nwant it unchanged:\n%v", tt.name, after, before)
			}
		})
	}

	wantStatus(t, e.do(req{Method: "DELETE", Path: holder.Str("url")}), http.StatusOK, "")
	got := awaitAnswer(t, first, 10*time.Second).r
	wantStatus(t, got, http.StatusCreated, "")
	e.awaitWaiters(0)
	wantStatus(t, e.do(req{Method: "DELETE", Path: got.Str("url")}), http.StatusOK, "")
}

func TestLockHeldProblem(t *testing.T) {
	e := newEnv(t, envOptions{TicketTTL: time.Minute})
	tests := []struct {
		name           string
		giveTTL        int
		giveOwner      string
		giveQueued     int
		wantRetryAfter string
	}{
		{"sub-second lease rounds up to 1", 900, "", 0, "1"},
		{"whole seconds rounded up", 30000, "billing-worker-3", 0, "30"},
		{"queued waiters counted", 60000, "w", 2, "60"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			name := "lh" + strconv.Itoa(i)
			e.acquire(name, map[string]any{"ttl_ms": tt.giveTTL, "owner": tt.giveOwner})
			for range tt.giveQueued {
				wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{"fair": true}}), http.StatusAccepted, "")
			}
			got := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{"owner": "other"}})
			wantStatus(t, got, http.StatusLocked, "lock-held")
			if ra := got.Header.Get("Retry-After"); ra != tt.wantRetryAfter {
				t.Errorf("Retry-After %q, want %q", ra, tt.wantRetryAfter)
			}
			ttl := got.Int("ttl_ms")
			if _, ok := got.Body["ttl_ms"]; !ok || ttl <= 0 || ttl > int64(tt.giveTTL) {
				t.Errorf("ttl_ms %d, want in (0, %d]: %s", ttl, tt.giveTTL, got.Raw)
			}
			if ra := strconv.FormatInt((ttl+999)/1000, 10); ra != got.Header.Get("Retry-After") {
				t.Errorf("Retry-After %q, want %s from ttl_ms %d", got.Header.Get("Retry-After"), ra, ttl)
			}
			if o, ok := got.Body["owner"].(string); !ok || o != tt.giveOwner {
				t.Errorf("owner %v, want %q", got.Body["owner"], tt.giveOwner)
			}
			if _, ok := got.Body["waiters"]; !ok || got.Int("waiters") != int64(tt.giveQueued) {
				t.Errorf("waiters %v, want %d", got.Body["waiters"], tt.giveQueued)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name     string
		give     req
		wantEcho bool
	}{
		{"echoed", req{Method: "GET", Path: "/v1/locks/x", Header: map[string]string{"X-Request-Id": "abc-123"}}, true},
		{"echoed on a problem", req{Method: "GET", Path: "/v1/locks/a%20b", Header: map[string]string{"X-Request-Id": "req:42/x"}}, true},
		{"echoed on 404", req{Method: "GET", Path: "/nowhere", Header: map[string]string{"X-Request-Id": "n-1"}}, true},
		{"echoed at 128 characters", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": strings.Repeat("r", 128)}}, true},
		{"generated when absent", req{Method: "GET", Path: "/v1/locks/x"}, false},
		{"generated when too long", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": strings.Repeat("r", 129)}}, false},
		{"generated for a space", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": "a b"}}, false},
		{"generated for a tab", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": "a\tb"}}, false},
		{"generated for non-ASCII", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": "café"}}, false},
		{"generated for Latin-1 bytes", req{Method: "GET", Path: "/livez", Header: map[string]string{"X-Request-Id": "caf\xe9"}}, false},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			got := e.do(tt.give).Header.Get("X-Request-Id")
			give := tt.give.Header["X-Request-Id"]
			switch {
			case tt.wantEcho && got != give:
				t.Errorf("X-Request-Id %q, want %q echoed", got, give)
			case !tt.wantEcho && (got == "" || got == give):
				t.Errorf("X-Request-Id %q, want a generated one (sent %q)", got, give)
			case !tt.wantEcho && seen[got]:
				t.Errorf("X-Request-Id %q generated twice", got)
			}
			seen[got] = true
		})
	}
	// Control characters never get as far as the handlers: net/http refuses
	// the request (its own 400, with no id at all). Written raw, as Go's
	// client refuses to send them.
	for _, give := range []string{"a\x00b", "a\x1b[31mb", "a\x7fb", "a\rb"} {
		t.Run("control character "+strconv.Quote(give), func(t *testing.T) {
			e := envIn(t, e)
			c := e.dial(10 * time.Second)
			c.write("GET /livez HTTP/1.1\r\nHost: baton\r\nX-Request-Id: " + give + "\r\nConnection: close\r\n\r\n")
			got, err := c.read(http.MethodGet)
			if err != nil {
				t.Fatal(err)
			}
			if id := got.Header.Get("X-Request-Id"); strings.ContainsFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) || strings.Contains(string(got.Raw), give) {
				t.Errorf("X-Request-Id %q, body %q: the id sent (%q) came back", id, got.Raw, give)
			}
		})
	}
}

// A name sent percent-encoded (encodeURIComponent and Python's quote encode ':')
// is the name it encodes; an encoded character names may not hold is still a 400.
func TestPercentEncodedName(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tt := range []struct{ give, name string }{
		{give: "invoices%3A2024-06", name: "invoices:2024-06"},
		{give: "a%2Db", name: "a-b"},
	} {
		r := e.do(req{Method: "POST", Path: "/v1/locks/" + tt.give, Body: map[string]any{}})
		wantStatus(t, r, http.StatusCreated, "")
		if r.Str("name") != tt.name {
			t.Errorf("POST /v1/locks/%s: name %q, want %q", tt.give, r.Str("name"), tt.name)
		}
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/" + tt.give + "/leases/" + r.Str("lease")}), http.StatusOK, "")
		wantStatus(t, e.do(req{Method: "DELETE", Path: r.Str("url")}), http.StatusOK, "")
	}
	for _, bad := range []string{"a%2Fb", "%2E%2E", "%2E", "a%20b"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + bad, Body: map[string]any{}}), http.StatusBadRequest, "invalid-name")
	}
}
