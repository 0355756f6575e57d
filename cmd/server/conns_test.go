package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// BATON_MAX_CONNS bounds the client connections open at once, whatever they
// do (here one waits in a parked long-poll, two idle after a request): one
// more is closed as soon as it is accepted, without an answer, and counted.
// Once a connection closes, a new one is served again.
func TestConnectionLimit(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.RedisURL, cfg.MaxConns = rs.URL(), 3
	base, logs := startServe(t, cfg)
	addr := strings.TrimPrefix(base, "http://")
	idle := []*rawConn{dialConn(t, addr), dialConn(t, addr)}
	idle[0].send(t, "POST /v1/locks/cap HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if res := idle[0].read(t); res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %v", res)
	}
	waiter := dialConn(t, addr)
	waiter.send(t, "POST /v1/locks/cap HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"wait_ms\":30000}")
	idle[1].send(t, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if res := idle[1].read(t); res == nil || res.StatusCode != http.StatusOK {
		t.Fatalf("an idle connection's first request: %v", res)
	}

	over := dialConn(t, addr)
	over.send(t, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if res := over.read(t); res != nil {
		t.Fatalf("the fourth connection was served: %d", res.StatusCode)
	}

	idle[0].Close()
	var metrics string
	waitFor(t, "a connection served again", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(res.Body)
		metrics = string(b)
		return res.StatusCode == http.StatusOK
	})
	for _, want := range []string{"baton_connections_max 3", "baton_connections 3"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !strings.Contains(metrics, "baton_connections_refused_total ") || strings.Contains(metrics, "baton_connections_refused_total 0\n") {
		t.Error("baton_connections_refused_total did not count the refused connection")
	}
	if !strings.Contains(logs.String(), "connection limit reached") {
		t.Errorf("no warning about the limit in the log:\n%s", logs)
	}
	waiter.Close()
	idle[1].Close()
}

// rawConn is a client connection driven by hand.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialConn(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// read is the next answer, or nil when the server closed the connection
// without one.
func (c *rawConn) read(t *testing.T) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("no answer and no close within 10 s")
		}
		return nil
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}
