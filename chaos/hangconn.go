package main

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/batonhq/baton/client"
)

// hanger makes one request on a connection of its own, and hangs up when told
// to: it half-closes the connection (shutdown SHUT_WR, a FIN), which is all a
// server sees of a client that goes away, unless an answer has begun to arrive
// by then. It still reads what comes back: a client that closed its connection
// altogether would lose that answer, but the runner learns exactly what Baton
// answered after the client had gone. Cancelling the request's context instead
// (as a Go client that gives up does) would leave a race the runner cannot
// judge: an answer Baton wrote a moment before it learned that the client had
// gone, discarded by the client's transport, is a hold nobody knows that is not
// Baton's doing, and looks the same as one Baton failed to undo.
type hanger struct {
	cl *client.Client
	hc *http.Client

	mu       sync.Mutex
	conn     net.Conn
	answered bool      // answer bytes arrived before the hang-up
	hung     bool      // hung up before any answer arrived
	hungAt   time.Time // when
}

func newHanger(base, key string) *hanger {
	h := &hanger{}
	h.hc = &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialBaton(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			h.conn = c
			if h.hung { // hung up before the connection was made: nothing is sent
				_ = c.(*net.TCPConn).CloseWrite()
			}
			return &hangConn{Conn: c, h: h}, nil
		},
	}}
	h.cl = client.New(base, client.WithHTTPClient(h.hc), client.WithAPIKey(key), client.WithRetryMaxTime(0))
	return h
}

// hangUp hangs up unless an answer has begun to arrive.
func (h *hanger) hangUp() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.answered || h.hung {
		return
	}
	h.hung, h.hungAt = true, time.Now()
	if h.conn != nil {
		_ = h.conn.(*net.TCPConn).CloseWrite()
	}
}

// hungUp reports whether the client hung up before any answer arrived, and when.
func (h *hanger) hungUp() (bool, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hung, h.hungAt
}

func (h *hanger) close() { h.hc.CloseIdleConnections() }

// hangConn notes when the answer begins to arrive.
type hangConn struct {
	net.Conn
	h *hanger
}

func (c *hangConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.h.mu.Lock()
		if !c.h.hung {
			c.h.answered = true
		}
		c.h.mu.Unlock()
	}
	return n, err
}
