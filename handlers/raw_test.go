package handlers_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Requests written byte by byte on a TCP connection of their own, for what Go's
// client would not send as it is: an exact request line, a pipelined HEAD, a body
// that trickles in.

// rawConn is one connection to the env's server. Every read and write on it
// fails once its deadline passes, so that a server that never answers fails the
// test instead of hanging it.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dial connects to the env's server; the connection is closed when the test ends.
func (e *env) dial(within time.Duration) *rawConn {
	e.t.Helper()
	u, err := url.Parse(e.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, within)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		e.t.Fatal(err)
	}
	return &rawConn{t: e.t, c: c, br: bufio.NewReader(c)}
}

// write sends s as it is.
func (c *rawConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write %q: %v", s, err)
	}
}

// read reads one response to a request of the given method (a HEAD response has
// no body, whatever its Content-Length says) and decodes a JSON body.
func (c *rawConn) read(method string) (*resp, error) {
	res, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	out := &resp{Status: res.StatusCode, Header: res.Header, Raw: raw, Close: res.Close}
	if len(raw) > 0 && strings.Contains(res.Header.Get("Content-Type"), "json") {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out.Body); err != nil {
			c.t.Errorf("%s: body is not JSON: %v: %q", method, err, raw)
		}
	}
	return out, nil
}

// closed fails unless the server has closed the connection and sent nothing
// more: a clean end, or a reset (a server that closes with bytes of the client's
// still unread resets the connection).
func (c *rawConn) closed() {
	c.t.Helper()
	rest, err := io.ReadAll(c.br)
	if len(rest) > 0 || err != nil && !errors.Is(err, syscall.ECONNRESET) {
		c.t.Errorf("after the answer: %q, %v; want the connection closed", rest, err)
	}
}

// rawDo sends method and target exactly as given on a connection of its own,
// with no body, and validates the answer against api/openapi.yaml.
func (e *env) rawDo(method, target string) *resp {
	e.t.Helper()
	c := e.dial(10 * time.Second)
	c.write(method + " " + target + " HTTP/1.1\r\nHost: baton\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	got, err := c.read(method)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, target, err)
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		e.t.Fatal(err)
	}
	e.validate(&http.Request{Method: method, URL: u, Header: http.Header{}, Host: "baton"}, nil, got)
	return got
}
