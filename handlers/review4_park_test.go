package handlers_test

import (
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// Review 4 (parked long-polls): each runs parked and not parked, and wants the
// same behaviour from both.

// A parked fair acquire whose client hangs up leaves nothing queued: the next
// fair waiter gets the lock at once when it is released, not after the ticket
// ttl (the grant to the client that left is undone and handed on).
func TestReview4FairWaiterHangUpHandsOn(t *testing.T) {
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
func TestReview4MaxWaitersSlotBackAfterHangUp(t *testing.T) {
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
func TestReview4HTTP10(t *testing.T) {
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
func TestReview4PipelinedThenHalfClose(t *testing.T) {
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
func TestReview4NoGoroutineLeak(t *testing.T) {
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
func TestReview4RedisRestartManyParked(t *testing.T) {
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
