package main

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/metrics"
)

// connWarnEvery is how often at most a refused connection is logged.
const connWarnEvery = 10 * time.Second

// connLimit is a listener that keeps at most max connections open at once
// (BATON_MAX_CONNS). A connection past the limit is accepted and closed at
// once, so that its client learns so at once rather than waiting in the
// kernel's backlog, and counted in baton_connections_refused_total. Every
// open connection counts, parked long-polls and idle keep-alives included,
// until it is closed; the descriptors left over serve Redis and the rest of
// the process.
type connLimit struct {
	net.Listener
	max  int64
	open atomic.Int64
	met  *metrics.Metrics
	log  zerolog.Logger

	mu       sync.Mutex
	refused  int // since the last warning
	lastWarn time.Time
}

func limitConns(ln net.Listener, max int, met *metrics.Metrics, log zerolog.Logger) *connLimit {
	met.ConnsMax.Set(float64(max))
	return &connLimit{Listener: ln, max: int64(max), met: met, log: log}
}

// Accept returns the next connection within the limit, closing those beyond
// it; its errors are the inner listener's.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			l.refuse()
			continue
		}
		l.met.Conns.Inc()
		return &countedConn{Conn: c, l: l}, nil
	}
}

// refuse counts a refused connection and logs, at most every connWarnEvery,
// how many were refused since the last line.
func (l *connLimit) refuse() {
	l.met.ConnsRefused.Inc()
	l.mu.Lock()
	l.refused++
	now := time.Now()
	if now.Sub(l.lastWarn) < connWarnEvery {
		l.mu.Unlock()
		return
	}
	n := l.refused
	l.refused, l.lastWarn = 0, now
	l.mu.Unlock()
	l.log.Warn().Int("refused", n).Int64("max_conns", l.max).
		Msg("connection limit reached: new connections are closed at once (BATON_MAX_CONNS; see baton_connections_refused_total)")
}

// countedConn gives its slot back when it is closed, once.
type countedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.met.Conns.Dec()
	})
	return err
}

// CloseWrite lets net/http half-close the connection as it does a bare one.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SyscallConn is the socket's, so that a parked connection can be polled
// (package park).
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// NetConn is the connection under c.
func (c *countedConn) NetConn() net.Conn { return c.Conn }
