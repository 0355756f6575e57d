package park

import (
	"errors"
	"net"
	"sync"
)

// listener is the server's listener with a second source: connections whose
// parked answer is written and whose next request has begun, handed back to
// net/http as if just accepted. With TLS it wraps the TLS listener, so what
// comes back is the *tls.Conn, its handshake done.
type listener struct {
	net.Listener
	lot *Lot

	accepted chan accepted // from the goroutine that calls the inner Accept
	ready    chan struct{} // capacity 1: back has a connection
	done     chan struct{} // closed by Close

	mu     sync.Mutex
	back   []net.Conn
	closed bool
	once   sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

func newListener(inner net.Listener, lot *Lot) *listener {
	l := &listener{Listener: inner, lot: lot, accepted: make(chan accepted), ready: make(chan struct{}, 1),
		done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// acceptLoop hands the inner listener's connections and errors to Accept. An
// error goes up as it came, so that net/http backs off from a temporary one
// (too many open files) as it does today, and stops at a permanent one.
func (l *listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) && !isTemporary(err) {
			return
		}
	}
}

// isTemporary is what net/http's Serve retries an Accept error on.
func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.back) > 0 {
			c := l.back[0]
			l.back[0] = nil
			l.back = l.back[1:]
			l.mu.Unlock()
			return c, nil
		}
		closed := l.closed
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		select {
		case <-l.ready:
		case a := <-l.accepted:
			return a.c, a.err
		case <-l.done:
		}
	}
}

// handBack queues c for Accept; false when the listener is closed.
func (l *listener) handBack(c net.Conn) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.back = append(l.back, c)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
	return true
}

// Close closes the inner listener and the connections waiting to be handed
// back, and tells the lot: from now on a parked answer closes its connection,
// as net/http does with keep-alives off while it shuts down.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		back := l.back
		l.back = nil
		l.mu.Unlock()
		close(l.done)
		err = l.Listener.Close()
		for _, c := range back {
			_ = c.Close()
		}
		l.lot.closing()
	})
	return err
}
