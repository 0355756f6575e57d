package park

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Config are the server's timeouts a parked connection keeps to.
type Config struct {
	// IdleTimeout is how long a connection may wait for its next request after
	// a parked answer (the server's IdleTimeout; 0: no limit).
	IdleTimeout time.Duration
	// WriteTimeout bounds the writing of an answer, from the moment its request
	// was read (the server's WriteTimeout; 0: no limit).
	WriteTimeout time.Duration
}

// ErrNotParked is Park's answer when the request cannot park: the caller
// serves it on net/http's goroutine as before.
var ErrNotParked = errors.New("park: request not parked")

// A Lot holds the parked connections of one server: it takes them from
// net/http (Park), watches them for hang-ups with one poller, writes their
// answers (Spot.Finish) and gives them back to the server for their next
// request (Listen). The zero Lot is not usable; New makes one.
type Lot struct {
	cfg Config
	p   *poller

	mu      sync.Mutex
	spots   map[uint64]*Spot // by poller token: parked, or idle after their answer
	token   uint64
	ln      *listener
	closed  bool           // the listener closed: the server shuts down
	parked  sync.WaitGroup // answers not yet written
	stopped bool
}

// New starts a lot and its poller. It fails where parking is unsupported (not
// Linux); the server then serves every long-poll as before.
func New(cfg Config) (*Lot, error) {
	l := &Lot{cfg: cfg, spots: map[uint64]*Spot{}}
	p, err := newPoller(l.event)
	if err != nil {
		return nil, err
	}
	l.p = p
	return l, nil
}

// Listen wraps the server's listener (with TLS, the TLS listener): its Accept
// also returns the connections the lot hands back. Serve on what it returns.
func (l *Lot) Listen(inner net.Listener) net.Listener {
	ln := newListener(inner, l)
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	return ln
}

type connKey struct{}

// ConnContext is the server's ConnContext: it keeps each connection in its
// requests' contexts, so that Park can look at a connection before it takes it.
func (l *Lot) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Handler restores what net/http cannot see on a connection handed back with
// bytes it had read ahead (a pipelined request): such a connection reaches the
// server wrapped, so its requests would lack their TLS state (r.TLS), which
// client-certificate principals need.
func (l *Lot) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if c, _ := r.Context().Value(connKey{}).(net.Conn); c != nil {
				if tc := tlsOf(c); tc != nil {
					st := tc.ConnectionState()
					r.TLS = &st
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Park takes the connection of request r, whose handler is about to wait for
// its answer, off net/http's hands: r's handler then returns, and net/http's
// goroutine and buffers for the connection are gone while it waits. gone is
// called, once, if the client hangs up before the answer is written. since is
// when the request was read (the write deadline counts from it).
//
// It returns ErrNotParked, leaving the request to net/http, for anything but
// an HTTP/1.x request on a socket this lot's server accepted (HTTP/2, a
// writer that cannot be hijacked, a server without ConnContext), for a request
// whose body was not read to its end (body says so), and once the server shuts
// down. After taking the connection it cannot fail: the caller must answer
// through the Spot.
func (l *Lot) Park(w http.ResponseWriter, r *http.Request, bodyRead bool, since time.Time, gone func()) (*Spot, error) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if r.ProtoMajor != 1 || c == nil || !bodyRead {
		return nil, ErrNotParked
	}
	fd, err := fdOf(c)
	if err != nil {
		return nil, ErrNotParked
	}
	l.mu.Lock()
	if l.closed || l.ln == nil {
		l.mu.Unlock()
		return nil, ErrNotParked
	}
	l.parked.Add(1) // under mu, before Shutdown's Wait: it sets closed under mu first
	l.mu.Unlock()

	hc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		l.parked.Done()
		return nil, ErrNotParked
	}
	// The spot is complete before Close or the poller can see it.
	s := &Spot{lot: l, fd: fd, q: requestOf(r), header: flat(w.Header()), gone: gone, conn: bare(hc)}
	if l.cfg.WriteTimeout > 0 {
		s.deadline = since.Add(l.cfg.WriteTimeout)
	}
	if n := brw.Reader.Buffered(); n > 0 {
		s.prefix, _ = brw.Reader.Peek(n)
		s.prefix = append([]byte(nil), s.prefix...)
	}
	l.mu.Lock()
	if l.stopped { // Close ran meanwhile: as if it had abandoned the spot
		l.mu.Unlock()
		s.state = ended
		_ = s.conn.Close()
		gone()
		return s, nil
	}
	l.token++
	s.token = l.token
	s.mu.Lock() // until it is watched: Close and the poller wait for it
	l.spots[s.token] = s
	l.mu.Unlock()
	// A plain connection is watched for bytes too: a next request (pipelined)
	// means the client is there, as net/http's background read takes its
	// first byte, and a half-close behind it is no hang-up. Not under TLS,
	// where bytes may be the client's close_notify.
	s.peekable = tlsOf(hc) == nil
	err = l.p.watch(fd, s.token, s.peekable, true)
	if err != nil {
		s.hungUp = true // nothing could tell when the client goes: take it as gone
	}
	s.mu.Unlock()
	if err != nil {
		gone()
	}
	return s, nil
}

// flat is h as keys and values in one slice: a parked request keeps its header
// for the answer, and a map of two or three keys costs ten times as much.
func flat(h http.Header) []string {
	n := 0
	for _, vs := range h {
		n += 2 * len(vs)
	}
	kv := make([]string, 0, n)
	for k, vs := range h {
		for _, v := range vs {
			kv = append(kv, k, v)
		}
	}
	return kv
}

// event handles what the poller reports for a spot.
func (l *Lot) event(token uint64, ev event) {
	l.mu.Lock()
	s := l.spots[token]
	l.mu.Unlock()
	if s != nil {
		s.event(ev)
	}
}

// drop forgets a spot: the poller no longer reports for it.
func (l *Lot) drop(s *Spot) {
	l.mu.Lock()
	delete(l.spots, s.token)
	l.mu.Unlock()
	l.p.forget(s.fd)
}

// closing is the listener's Close: answers written from now on close their
// connection, and idle connections are closed now, as net/http does when it
// shuts down.
func (l *Lot) closing() {
	l.mu.Lock()
	l.closed = true
	var idle []*Spot
	for _, s := range l.spots {
		idle = append(idle, s)
	}
	l.mu.Unlock()
	for _, s := range idle {
		s.closeIfIdle()
	}
}

// Shutdown waits until every parked answer is written or ctx ends, then closes
// what is left and stops the poller. Close the server's listener first (the
// server's Shutdown does), so that no connection parks or comes back meanwhile.
func (l *Lot) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true // no Park from now on
	l.mu.Unlock()
	written := make(chan struct{})
	go func() { l.parked.Wait(); close(written) }()
	var err error
	select {
	case <-written:
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.Close()
	return err
}

// Close closes every connection the lot holds and stops its poller. Answers
// still to come find their connection closed.
func (l *Lot) Close() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped, l.closed = true, true
	all := make([]*Spot, 0, len(l.spots))
	for _, s := range l.spots {
		all = append(all, s)
	}
	l.mu.Unlock()
	for _, s := range all {
		s.abandon()
	}
	l.p.close()
}

func (l *Lot) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Held is how many connections the lot holds: parked, or idle after their
// answer.
func (l *Lot) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.spots)
}
