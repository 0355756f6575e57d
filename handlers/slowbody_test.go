package handlers_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A request body must arrive within Limits.BodyReadTimeout: a client that
// announces a body and then trickles it in, a byte now and then, must not keep a
// connection and a goroutine for as long as it likes.

// slowBodyTimeout is the short body read timeout these tests run with.
const slowBodyTimeout = 300 * time.Millisecond

// trickle writes head, then one byte of body every interval until the test ends
// or the server closes the connection.
func (c *rawConn) trickle(head string, next func(i int) string, interval time.Duration) {
	c.t.Helper()
	c.write(head)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(c.c, next(i)); err != nil {
				return
			}
		}
	}()
	c.t.Cleanup(func() { close(stop); <-done })
}

func TestBodyReadTimeout(t *testing.T) {
	limits := apiLimits
	limits.BodyReadTimeout = slowBodyTimeout
	e := newEnv(t, envOptions{Limits: limits})
	lease := e.acquire("held", map[string]any{"ttl_ms": 300000}).Str("url")
	space := func(int) string { return " " }
	chunk := func(int) string { return "1\r\n \r\n" }
	tests := []struct {
		name, method, path, header string
		first                      string           // the body's first bytes, sent with the headers
		next                       func(int) string // what trickles in after them
		want                       int
		wantKind                   string
	}{
		{"acquire", "POST", "/v1/locks/slow", "Content-Length: 200", "{", space, http.StatusRequestTimeout, "request-timeout"},
		{"acquire chunked", "POST", "/v1/locks/slow", "Transfer-Encoding: chunked", "1\r\n{\r\n", chunk, http.StatusRequestTimeout, "request-timeout"},
		{"acquire, nothing after the headers", "POST", "/v1/locks/slow", "Content-Length: 20", "", func(int) string { return "" }, http.StatusRequestTimeout, "request-timeout"},
		{"renew", "PATCH", lease, "Content-Length: 200", `{"ttl_ms":`, space, http.StatusRequestTimeout, "request-timeout"},
		// A route that reads no body answers, and net/http then gives up the
		// body's rest at the same deadline and closes the connection.
		{"state, a body it does not read", "GET", "/v1/locks/held", "Content-Length: 200", "x", space, http.StatusOK, ""},
		{"release, a body it does not read", "DELETE", "/v1/locks/held/leases/" + unknownID(), "Content-Length: 200", "x", space, http.StatusNotFound, "lease-not-held"},
	}
	timeouts := 0.0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			before := e.snapshot()
			c := e.dial(5 * time.Second) // bounds the test: today's server would wait for the body for ever
			start := time.Now()
			c.trickle(tt.method+" "+tt.path+" HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\n"+tt.header+"\r\n\r\n"+tt.first, tt.next, 50*time.Millisecond)
			got, err := c.read(tt.method)
			if err != nil {
				t.Fatalf("no answer within 5 s while the body trickles in: %v", err)
			}
			elapsed := time.Since(start)
			wantStatus(t, got, tt.want, tt.wantKind)
			u, _ := url.ParseRequestURI(tt.path)
			e.validate(&http.Request{Method: tt.method, URL: u, Header: http.Header{}, Host: "baton"}, nil, got)
			if elapsed < limits.BodyReadTimeout {
				t.Errorf("answered after %v, before the body read timeout of %v", elapsed, limits.BodyReadTimeout)
			}
			if got.Status == http.StatusRequestTimeout {
				timeouts++
			}
			// Whatever the answer, the connection is closed: the body's rest can
			// not be told from a next request.
			if !got.Close {
				t.Errorf("%d without Connection: close", got.Status)
			}
			c.closed()
			if after := e.snapshot(); !sameKeys(before, after) {
				t.Errorf("Redis after a body that never came:\n%v\nwant it unchanged:\n%v", after, before)
			}
		})
	}
	if got := testutil.ToFloat64(e.Metrics.BodyReadTimeouts); got != timeouts {
		t.Errorf("baton_body_read_timeouts_total %v, want %v", got, timeouts)
	}
}

// TestBodyReadTimeoutLeavesWaitsAlone: the deadline ends with the body. A wait
// that follows a body that came in time runs its full course, and the connection
// serves the next request.
func TestBodyReadTimeoutLeavesWaitsAlone(t *testing.T) {
	limits := apiLimits
	limits.BodyReadTimeout = slowBodyTimeout
	e := newEnv(t, envOptions{Limits: limits})
	e.acquire("held", map[string]any{"ttl_ms": 300000})
	wait := 4 * limits.BodyReadTimeout
	body := `{"wait_ms":` + strconv.FormatInt(wait.Milliseconds(), 10) + `}`

	c := e.dial(10 * time.Second)
	start := time.Now()
	c.write("POST /v1/locks/held HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	got, err := c.read("POST")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, http.StatusLocked, "lock-held")
	if elapsed := time.Since(start); elapsed < wait {
		t.Errorf("423 after %v, want the whole wait_ms of %v", elapsed, wait)
	}
	c.write("GET /v1/locks/held?wait_ms=" + strconv.FormatInt(wait.Milliseconds(), 10) + " HTTP/1.1\r\nHost: baton\r\n\r\n")
	if got, err = c.read("GET"); err != nil {
		t.Fatalf("the next request on the connection: %v", err)
	}
	wantStatus(t, got, http.StatusOK, "")
	if n := testutil.ToFloat64(e.Metrics.BodyReadTimeouts); n != 0 {
		t.Errorf("baton_body_read_timeouts_total %v, want 0", n)
	}
}

// TestBodyCutShort: a body that ends before its Content-Length (the client
// stopped sending) is the client's error, not the server's: a 400, and nothing
// logged above info, so hostile clients cannot fill the error log.
func TestBodyCutShort(t *testing.T) {
	e := newEnv(t, envOptions{})
	before := e.snapshot()
	c := e.dial(5 * time.Second)
	c.write("POST /v1/locks/cut HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"ttl_ms\":")
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := c.read("POST")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, got, http.StatusBadRequest, "invalid-request")
	for _, l := range strings.Split(e.Logs.String(), "\n") {
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"warn"`) {
			t.Errorf("logged: %s", l)
		}
	}
	if after := e.snapshot(); !sameKeys(before, after) {
		t.Errorf("Redis after a body cut short:\n%v\nwant it unchanged:\n%v", after, before)
	}
}
