package park

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// wire must write, byte for byte, what net/http writes for the same answer to
// the same request: a parked answer may not differ from today's. A real server
// answers each case; its bytes (and whether it kept the connection) are
// compared with wire's.
func TestWireMatchesNetHTTP(t *testing.T) {
	srv, addr := wireServer(t)
	type give struct {
		method, proto, conn string
		status, size        int
		noType, keepOff     bool
	}
	var cases []give
	for _, m := range []string{"GET", "HEAD"} {
		for _, pc := range [][2]string{
			{"HTTP/1.1", ""}, {"HTTP/1.1", "close"}, {"HTTP/1.1", "keep-alive"}, {"HTTP/1.1", "Keep-Alive, Close"},
			{"HTTP/1.0", ""}, {"HTTP/1.0", "keep-alive"}, {"HTTP/1.0", "close"},
		} {
			for _, status := range []int{200, 201, 202, 204, 410, 423, 503} {
				for _, size := range []int{0, 300, 2048, 2049, 9000} {
					for _, keepOff := range []bool{false, true} {
						cases = append(cases, give{method: m, proto: pc[0], conn: pc[1], status: status, size: size, keepOff: keepOff})
					}
				}
			}
			cases = append(cases, give{method: m, proto: pc[0], conn: pc[1], status: 200, size: 300, noType: true},
				give{method: m, proto: pc[0], conn: pc[1], status: 599, size: 10})
		}
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s %s conn=%q %d %dB notype=%v keepalives-off=%v", c.method, c.proto, c.conn, c.status, c.size, c.noType, c.keepOff)
		srv.SetKeepAlivesEnabled(!c.keepOff)
		raw := fmt.Sprintf("%s /?status=%d&size=%d&notype=%v %s\r\nHost: x\r\n", c.method, c.status, c.size, c.noType, c.proto)
		if c.conn != "" {
			raw += "Connection: " + c.conn + "\r\n"
		}
		raw += "\r\n"
		got, gotClosed := exchange(t, addr, raw, c.method)

		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			t.Fatal(err)
		}
		header, body := wireAnswer(c.status, c.size, c.noType)
		want, wantClosed := wire(requestOf(r), c.status, header, body, !c.keepOff, time.Now())
		if d := dateless(got); d != dateless(string(want)) {
			t.Errorf("%s:\nnet/http wrote %q\nwire wrote     %q", name, d, dateless(string(want)))
		}
		if gotClosed != wantClosed {
			t.Errorf("%s: net/http closed the connection: %v; wire says %v", name, gotClosed, wantClosed)
		}
	}
}

// wireAnswer is what the test server's handler answers: the headers Baton's
// answers carry (one of them twice), and a body of size bytes.
func wireAnswer(status, size int, noType bool) (http.Header, []byte) {
	h := http.Header{}
	h.Set("X-Request-Id", "0123456789abcdef")
	h.Set("Cache-Control", "no-store")
	if !noType {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Retry-After", "1")
	h.Add("Vary", "a")
	h.Add("Vary", "b")
	h.Set("Location", "/v1/locks/x/leases/l")
	return h, bytes.Repeat([]byte("y"), size)
}

func wireServer(t *testing.T) (*http.Server, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		h, body := wireAnswer(status, size, r.URL.Query().Get("notype") == "true")
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}), ErrorLog: nil}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, ln.Addr().String()
}

// exchange sends raw on a new connection and returns the raw answer, and
// whether the server closed the connection after it (a second request gets no
// answer).
func exchange(t *testing.T, addr, raw, method string) (string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatal(err)
	}
	answer := got.String()[:got.Len()-br.Buffered()]
	if _, err := io.WriteString(c, raw); err != nil {
		return answer, true
	}
	_, err = http.ReadResponse(br, &http.Request{Method: method})
	return answer, err != nil
}

var dateLine = regexp.MustCompile(`\r\nDate: [^\r]*\r\n`)

func dateless(s string) string { return dateLine.ReplaceAllString(s, "\r\nDate: (now)\r\n") }
