package handlers_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/internal/redistest"
)

// Tests of parked long-polls (package park): a long-poll that waits
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

// A parked fair acquire whose client hangs up leaves nothing queued: the next
// fair waiter gets the lock at once when it is released, not after the ticket
// ttl (the grant to the client that left is undone and handed on).
func TestParkedFairWaiterThatHangsUpHandsOnAtOnce(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park, TicketTTL: 20 * time.Second})
		h := e.acquire("fh", map[string]any{"ttl_ms": 30000})
		a := e.dial(20 * time.Second)
		a.write(rawPost("/v1/locks/fh", `{"wait_ms": 15000, "fair": true, "owner": "a"}`))
		e.awaitWaiters(1)
		b := e.dial(20 * time.Second)
		b.write(rawPost("/v1/locks/fh", `{"wait_ms": 15000, "fair": true, "owner": "b"}`))
		e.awaitWaiters(2)
		e.awaitHeld(2)
		_ = a.c.Close()
		e.awaitWaiters(1)
		e.awaitHeld(1)
		start := time.Now()
		wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
		_ = b.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := b.read("POST")
		if err != nil {
			t.Fatalf("b's answer: %v (after %v)", err, time.Since(start))
		}
		wantStatus(t, got, http.StatusCreated, "")
		if st := e.state("fh"); st.Str("owner") != "b" {
			t.Errorf("holder after hand-on: %s", st.Raw)
		}
	})
}

// A parked watch whose client hangs up gives its key's max_waiters slot back.
func TestParkedWatchThatHangsUpGivesItsWaiterSlotBack(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		k := newTestKeys()
		e := newEnv(t, envOptions{Keys: k.file(), NoPark: !park})
		h := e.do(req{Method: "POST", Path: "/v1/locks/narrow:a", Body: map[string]any{}, Header: bearer(k.narrow)})
		wantStatus(t, h, http.StatusCreated, "")
		for i := 0; i < 3; i++ {
			c := e.dial(20 * time.Second)
			id := "slot-" + itoa(i)
			c.write("GET /v1/locks/narrow:a?wait_ms=10000 HTTP/1.1\r\nHost: baton\r\nX-Request-Id: " + id +
				"\r\nAuthorization: Bearer " + k.narrow + "\r\n\r\n")
			e.awaitWaiters(1)
			e.awaitHeld(1)
			_ = c.c.Close()
			e.awaitWaiters(0)
			e.awaitHeld(0)
			// The store's wait ends before the handler gives the key's slot
			// back; the request is logged after it has.
			pollUntil(t, 10*time.Second, "the hung-up watch logged", func() bool { return len(e.accessLines(id)) > 0 })
		}
		r := e.do(req{Method: "GET", Path: "/v1/locks/narrow:a?wait_ms=200", Header: bearer(k.narrow)})
		wantStatus(t, r, http.StatusOK, "")
	})
}

// HTTP/1.0 without keep-alive: the parked answer, then the connection closed;
// with keep-alive: the answer says so and the connection serves the next one.
func TestParkedAnswerOverHTTP10WithAndWithoutKeepAlive(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park})
		for _, ka := range []bool{false, true} {
			h := e.acquire("h10", map[string]any{"ttl_ms": 30000})
			c := e.dial(20 * time.Second)
			hdr := ""
			if ka {
				hdr = "Connection: keep-alive\r\n"
			}
			c.write("GET /v1/locks/h10?wait_ms=10000 HTTP/1.0\r\nHost: baton\r\n" + hdr + "\r\n")
			e.awaitWaiters(1)
			e.awaitHeld(1)
			wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
			got, err := c.read("GET")
			if err != nil {
				t.Fatal(err)
			}
			wantStatus(t, got, http.StatusOK, "")
			if !ka {
				c.closed()
				continue
			}
			if got.Close {
				t.Errorf("HTTP/1.0 keep-alive answer closes")
			}
			c.write("GET /livez HTTP/1.0\r\nHost: baton\r\nConnection: keep-alive\r\n\r\n")
			if got, err := c.read("GET"); err != nil || got.Status != http.StatusOK {
				t.Fatalf("next request on the kept connection: %v %v", got, err)
			}
		}
	})
}

// A client that pipelines its next request while the first waits, then
// half-closes its side (printf ... | nc -N), is still there: net/http's
// background read saw the next request's first byte and stops looking, and
// answers both. A parked request must not take that half-close for a hang-up.
func TestPipelinedThenHalfClosedClientIsAnsweredBoth(t *testing.T) {
	parkModes(t, func(t *testing.T, park bool) {
		e := newEnv(t, envOptions{NoPark: !park})
		h := e.acquire("phc", map[string]any{"ttl_ms": 30000})
		c := e.dial(20 * time.Second)
		c.write("GET /v1/locks/phc?wait_ms=10000 HTTP/1.1\r\nHost: baton\r\n\r\n")
		e.awaitWaiters(1)
		e.awaitHeld(1)
		time.Sleep(50 * time.Millisecond)
		c.write("GET /livez HTTP/1.1\r\nHost: baton\r\n\r\n")
		time.Sleep(50 * time.Millisecond)
		_ = c.c.(*net.TCPConn).CloseWrite()
		time.Sleep(200 * time.Millisecond)
		wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
		for i, want := range []int{http.StatusOK, http.StatusOK} {
			got, err := c.read("GET")
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			wantStatus(t, got, want, "")
		}
	})
}

// Many parked long-polls, answered or hung up, leave no goroutine behind.
func TestParkedLongPollsLeaveNoGoroutine(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.acquire("gl", map[string]any{"ttl_ms": 30000})
	e.do(req{Method: "GET", Path: "/livez"})
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 100
	var cs []*rawConn
	for i := 0; i < n; i++ {
		c := e.dial(30 * time.Second)
		c.write("GET /v1/locks/gl?wait_ms=20000 HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
		cs = append(cs, c)
	}
	e.awaitWaiters(n)
	e.awaitHeld(n)
	for _, c := range cs[:n/2] {
		_ = c.c.Close()
	}
	e.awaitWaiters(n / 2)
	wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
	for _, c := range cs[n/2:] {
		if got, err := c.read("GET"); err != nil || got.Status != http.StatusOK {
			t.Fatalf("answer: %v %v", got, err)
		}
	}
	e.awaitWaiters(0)
	e.awaitHeld(0)
	pollUntil(t, 10*time.Second, "goroutines back", func() bool { return runtime.NumGoroutine() <= before+5 })
}

// Redis restarts (empty) while many long-polls are parked on one lock: the
// watches see it change hands and answer, one non-fair waiter is granted, the rest
// keep waiting and answer 423 at their deadline; nobody hangs, nothing is
// left parked. The waits are long enough that Redis is back, and the store
// subscribed again, well before they end, however slow the restart.
func TestRedisRestartUnderManyParkedLongPollsLeavesNoneHanging(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, envOptions{Redis: srv})
	h := e.acquire("rr", map[string]any{"ttl_ms": 60000})
	const nw, nl = 10, 20
	var watches, waits []<-chan answer
	for i := 0; i < nw; i++ {
		watches = append(watches, e.send(req{Method: "GET", Path: "/v1/locks/rr?wait_ms=30000"}))
	}
	sent := time.Now()
	for i := 0; i < nl; i++ {
		waits = append(waits, e.send(req{Method: "POST", Path: "/v1/locks/rr", Body: map[string]any{"wait_ms": 20000, "ttl_ms": 30000}}))
	}
	e.awaitWaiters(nw + nl)
	e.awaitHeld(nw + nl)
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	e.awaitSubscribers("rr", 1) // the store's waiters are registered on the new Redis
	back := time.Now()
	if d := back.Sub(sent); d > 20*time.Second-2*promptly {
		t.Fatalf("Redis back and subscribed %v after the waiters were sent: too late to tell a grant from their deadline", d)
	}
	for i, w := range watches {
		a := awaitAnswer(t, w, 10*time.Second)
		if a.r.Status != http.StatusOK || a.r.Bool("held") && a.r.Int("fence") == h.Int("fence") {
			t.Errorf("watch %d: %d %s", i, a.r.Status, a.r.Raw)
		}
		if late := a.at.Sub(back); late > promptly {
			t.Errorf("watch %d answered %v after Redis came back, want at once, not at its wait's end", i, late)
		}
	}
	granted := 0
	for i, w := range waits {
		a := awaitAnswer(t, w, 30*time.Second)
		switch a.r.Status {
		case http.StatusCreated:
			granted++
			if late := a.at.Sub(back); late > promptly {
				t.Errorf("waiter %d granted %v after Redis came back, want at once, not at its wait's end", i, late)
			}
		case http.StatusLocked, http.StatusServiceUnavailable:
		default:
			t.Errorf("waiter %d: %d %s", i, a.r.Status, a.r.Raw)
		}
	}
	if granted != 1 {
		t.Errorf("%d waiters granted after Redis restarted empty, want 1", granted)
	}
	e.awaitWaiters(0)
	e.client.CloseIdleConnections()
	e.awaitHeld(0)
}
