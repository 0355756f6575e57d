package park

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// prefixed is a connection whose first bytes net/http had read already when
// its request parked: a request the client sent behind the parked one
// (pipelining). It goes back to the server with them.
type prefixed struct {
	net.Conn
	prefix []byte
}

func (c *prefixed) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close the connection as it does a bare one.
func (c *prefixed) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection under c.
func (c *prefixed) NetConn() net.Conn { return c.Conn }

// bare strips what an earlier parking wrapped around a connection once its
// carried bytes are read, so that net/http sees a *tls.Conn as one again.
func bare(c net.Conn) net.Conn {
	for {
		p, ok := c.(*prefixed)
		if !ok || len(p.prefix) > 0 {
			return c
		}
		c = p.Conn
	}
}

// tlsOf is the TLS connection c is or wraps, or nil.
func tlsOf(c net.Conn) *tls.Conn {
	for {
		switch x := c.(type) {
		case *tls.Conn:
			return x
		case *prefixed:
			c = x.Conn
		default:
			return nil
		}
	}
}

var errNoSocket = errors.New("park: not a socket connection")

// fdOf is the descriptor of the socket under c (itself, or under TLS or a
// prefix). It stays valid while c is open.
func fdOf(c net.Conn) (int, error) {
	for {
		switch x := c.(type) {
		case *prefixed:
			c = x.Conn
			continue
		case *tls.Conn:
			c = x.NetConn()
			continue
		case syscall.Conn:
			rc, err := x.SyscallConn()
			if err != nil {
				return -1, err
			}
			fd := -1
			if err := rc.Control(func(s uintptr) { fd = int(s) }); err != nil {
				return -1, err
			}
			return fd, nil
		}
		return -1, errNoSocket
	}
}
