package handlers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/auth"
)

// Tests of parked long-polls (package park, issue 15): a long-poll that waits
// gives its connection to the lot, and must be answered, logged, counted,
// kept alive, noticed gone and shut down exactly as on net/http's goroutine.
// Each runs with parking and without it (envOptions.NoPark), and checks both
// give the same answers.

// parkModes runs f with parking on and off.
func parkModes(t *testing.T, f func(t *testing.T, park bool)) {
	for _, park := range []bool{true, false} {
		t.Run(map[bool]string{true: "parked", false: "not-parked"}[park], func(t *testing.T) { f(t, park) })
	}
}

// awaitHeld waits until the lot holds n connections (parked, or idle after a
// parked answer); with parking off, there is no lot and nothing to wait for.
func (e *env) awaitHeld(n int) {
	e.t.Helper()
	if e.Lot == nil {
		return
	}
	pollUntil(e.t, 10*time.Second, fmt.Sprintf("lot holds %d connections", n), func() bool { return e.Lot.Held() == n })
}

// rawPost is a POST of a JSON body, as written on a raw connection.
func rawPost(path, body string, header ...string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n" + strings.Join(header, "") +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
}

// accessLines are the access log's lines for request id.
func (e *env) accessLines(id string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(e.Logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" && m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// A waiting acquire parks; its answer carries the request's X-Request-Id and
// Cache-Control, is logged once and counted as observe does, and its
// connection stays open for the next requests, among them a second long-poll,
// whose client then hangs up: the wait ends, nothing is granted to it, and the
// lot lets go of the connection.
func TestParkedAcquireAnswerLogKeepAliveHangUp(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park})
		h := e.acquire("pk", map[string]any{"ttl_ms": 30000})
		h2 := e.acquire("pk2", map[string]any{"ttl_ms": 30000})
		c := e.dial(20 * time.Second)
		c.write(rawPost("/v1/locks/pk", `{"wait_ms": 10000, "owner": "w"}`, "X-Request-Id: park-req-1\r\n"))
		e.awaitWaiters(1)
		e.awaitHeld(1)
		counted := e.Metrics.Requests.WithLabelValues("/v1/locks/{name}", "POST", "201", auth.AnyoneName)
		before := testutil.ToFloat64(counted)

		wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
		got, err := c.read("POST")
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, got, http.StatusCreated, "")
		if got.Header.Get("X-Request-Id") != "park-req-1" || got.Header.Get("Cache-Control") != "no-store" ||
			got.Header.Get("Location") != got.Str("url") || got.Close {
			t.Errorf("parked answer's header %v close=%v", got.Header, got.Close)
		}
		// The request is counted, then logged, once its answer is written: the
		// client may read the answer before either.
		pollUntil(t, 10*time.Second, "the answer counted", func() bool { return testutil.ToFloat64(counted) == before+1 })
		pollUntil(t, 10*time.Second, "the answer logged", func() bool { return len(e.accessLines("park-req-1")) > 0 })
		lines := e.accessLines("park-req-1")
		if len(lines) != 1 || lines[0]["status"] != 201.0 || lines[0]["route"] != "/v1/locks/{name}" ||
			lines[0]["method"] != "POST" || lines[0]["principal"] != auth.AnyoneName || lines[0]["bytes"] != float64(len(got.Raw)) {
			t.Errorf("access log of the parked request: %v", lines)
		}
		if l := got.Str("lease"); l == "" || strings.Contains(e.Logs.String(), l) {
			t.Errorf("lease %q: in the log, or none", got.Str("lease"))
		}

		c.write("GET /v1/locks/pk HTTP/1.1\r\nHost: baton\r\n\r\n") // kept alive
		st, err := c.read("GET")
		if err != nil {
			t.Fatalf("second request on the connection: %v", err)
		}
		wantStatus(t, st, http.StatusOK, "")
		if !st.Bool("held") {
			t.Errorf("state after the grant: %s", st.Raw)
		}

		c.write(rawPost("/v1/locks/pk2", `{"wait_ms": 10000, "owner": "gone"}`))
		e.awaitWaiters(1)
		e.awaitHeld(1)
		_ = c.c.Close()
		e.awaitWaiters(0)
		e.awaitHeld(0)
		wantStatus(t, e.do(req{Method: "DELETE", Path: h2.Str("url")}), http.StatusOK, "")
		if st := e.state("pk2"); st.Bool("held") {
			t.Errorf("a waiter that hung up was granted the lock: %s", st.Raw)
		}
	})
}

// A ticket poll that parks and whose client hangs up leaves its ticket queued,
// as today: the grant that follows is kept for the ticket's next poll.
func TestParkedTicketPollHangUp(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park, TicketTTL: 20 * time.Second})
		h := e.acquire("tp", map[string]any{"ttl_ms": 30000})
		tk := e.enqueue("tp", map[string]any{"owner": "w"})
		c := e.dial(20 * time.Second)
		c.write("GET " + tk.Str("url") + "?wait_ms=10000 HTTP/1.1\r\nHost: baton\r\n\r\n")
		e.awaitWaiters(1)
		e.awaitHeld(1)
		_ = c.c.Close()
		e.awaitWaiters(0)
		e.awaitHeld(0)
		wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
		wantStatus(t, e.poll(tk.Str("url"), 5000), http.StatusOK, "")
	})
}

// The store's shutdown answers every long-poll at once, parked or not, each
// with its "still waiting" answer, on connections that stay open.
func TestShutdownAnswersParkedAtOnce(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park, TicketTTL: 20 * time.Second})
		e.acquire("sd", map[string]any{"ttl_ms": 30000})
		type waiter struct {
			c      *rawConn
			method string
			want   int
		}
		var ws []waiter
		for i := range 30 {
			c := e.dial(20 * time.Second)
			switch i % 3 {
			case 0:
				c.write(rawPost("/v1/locks/sd", `{"wait_ms": 30000}`))
				ws = append(ws, waiter{c, "POST", http.StatusLocked})
			case 1:
				tk := e.enqueue("sd", map[string]any{"owner": fmt.Sprint("t", i)})
				c.write("GET " + tk.Str("url") + "?wait_ms=30000 HTTP/1.1\r\nHost: baton\r\n\r\n")
				ws = append(ws, waiter{c, "GET", http.StatusAccepted})
			default:
				c.write("GET /v1/locks/sd?wait_ms=30000 HTTP/1.1\r\nHost: baton\r\n\r\n")
				ws = append(ws, waiter{c, "GET", http.StatusOK})
			}
		}
		e.awaitWaiters(30)
		e.awaitHeld(30)
		sent := time.Now()
		e.Store.Shutdown()
		for i, w := range ws {
			got, err := w.c.read(w.method)
			if err != nil {
				t.Fatalf("waiter %d at shutdown: %v", i, err)
			}
			if got.Status != w.want || got.Close {
				t.Errorf("waiter %d answered %d close=%v at shutdown, want %d", i, got.Status, got.Close, w.want)
			}
		}
		if took := time.Since(sent); took > promptly {
			t.Errorf("parked long-polls answered %v after the shutdown, want at once (< %v), not at their waits' end", took, promptly)
		}
		ws[0].c.write("GET /livez HTTP/1.1\r\nHost: baton\r\n\r\n")
		if got, err := ws[0].c.read("GET"); err != nil || got.Status != http.StatusOK {
			t.Fatalf("request after the shutdown's answer on the same connection: %v %v", got, err)
		}
	})
}

// Access control answers before anything waits: a long-poll without a key, or
// with one that may not lock the name, is refused at once and never parks.
func TestAccessControlBeforeParking(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:p", Body: map[string]any{}, Header: bearer(k.billing)}),
		http.StatusCreated, "")
	for _, tt := range []struct {
		header map[string]string
		want   int
		typ    string
	}{
		{nil, http.StatusUnauthorized, "unauthorized"},
		{bearer(k.reader), http.StatusForbidden, "forbidden"},
		{bearer(k.narrow), http.StatusForbidden, "forbidden"},
	} {
		start := time.Now()
		r := e.do(req{Method: "POST", Path: "/v1/locks/billing:p", Body: map[string]any{"wait_ms": 20000}, Header: tt.header})
		wantStatus(t, r, tt.want, tt.typ)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("refused after %v", took)
		}
	}
	if n := e.Lot.Held(); n != 0 {
		t.Errorf("lot holds %d connections after refusals", n)
	}
}

// A long-poll whose body net/http has not read (a GET with one) cannot hand
// its connection over with the body's rest unread: it waits on net/http's
// goroutine, and is answered as before.
func TestUnreadBodyDoesNotPark(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.acquire("ub", map[string]any{"ttl_ms": 30000})
	c := e.dial(20 * time.Second)
	c.write("GET /v1/locks/ub?wait_ms=10000 HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello")
	e.awaitWaiters(1)
	if n := e.Lot.Held(); n != 0 {
		t.Errorf("lot holds %d connections: a request with an unread body parked", n)
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
	got, err := c.read("GET")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, http.StatusOK, "")
	if got.Bool("held") {
		t.Errorf("watch after the release: %s", got.Raw)
	}
}

// Requests pipelined behind a parked long-poll are answered after it, in
// order, on the same connection.
func TestPipelinedBehindParked(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park})
		h := e.acquire("pp", map[string]any{"ttl_ms": 30000})
		c := e.dial(20 * time.Second)
		c.write("GET /v1/locks/pp?wait_ms=10000 HTTP/1.1\r\nHost: baton\r\n\r\nGET /livez HTTP/1.1\r\nHost: baton\r\n\r\n")
		e.awaitWaiters(1)
		e.awaitHeld(1)
		wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
		for _, want := range []int{http.StatusOK, http.StatusOK} {
			got, err := c.read("GET")
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, got, want, "")
		}
	})
}
