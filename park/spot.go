package park

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// A Spot is one parked request: its connection, the handler's response header
// and what the answer's framing depends on. Its answer is written through
// ResponseWriter and sent by Finish.
type Spot struct {
	lot      *Lot
	fd       int
	token    uint64
	q        request
	header   []string // the handler's header when the request parked: key, value, key, value...
	gone     func()
	conn     net.Conn
	prefix   []byte    // bytes net/http had read past the request
	deadline time.Time // for writing the answer; zero: none

	rec *recorder

	mu        sync.Mutex
	state     spotState
	hungUp    bool        // the client closed or reset the connection
	peekable  bool        // parked watched for bytes too (plain connections)
	present   bool        // a next request began while parked: no more watching until the answer
	idleTimer *time.Timer // while idle
}

type spotState uint8

const (
	parked    spotState = iota // waiting for its answer
	answering                  // Finish writes
	idle                       // answered, waiting for the connection's next request
	ended                      // handed back or closed
)

// ResponseWriter is where the handler writes the answer, as it would to
// net/http's: the header it had set when the request parked is there.
func (s *Spot) ResponseWriter() http.ResponseWriter {
	if s.rec == nil {
		h := make(http.Header, len(s.header)/2+2)
		for i := 0; i < len(s.header); i += 2 {
			h[s.header[i]] = append(h[s.header[i]], s.header[i+1])
		}
		s.rec, s.header = &recorder{header: h}, nil
	}
	return s.rec
}

// Finish sends the answer written to ResponseWriter (200 and no body if none
// was) as net/http would have sent it, then gives the connection back to the
// server when its next request begins, or closes it where net/http would have
// (Connection: close, HTTP/1.0 without keep-alive, a server shutting down, a
// client that hung up, a failed write). It returns the status and the number
// of body bytes the handler wrote, for the access log.
func (s *Spot) Finish() (status, written int) {
	defer s.lot.parked.Done()
	s.ResponseWriter()
	if s.rec.status == 0 {
		s.rec.WriteHeader(http.StatusOK)
	}
	status, written = s.rec.status, len(s.rec.body)

	s.mu.Lock()
	if s.state != parked { // closed by the lot (Close)
		s.mu.Unlock()
		return status, written
	}
	s.state = answering
	s.mu.Unlock()

	out, closeAfter := wire(s.q, status, s.rec.snap, s.rec.body, !s.lot.isClosed(), time.Now())
	s.rec = nil
	_ = s.conn.SetWriteDeadline(s.deadline)
	_, err := s.conn.Write(out)
	_ = s.conn.SetWriteDeadline(time.Time{})

	s.mu.Lock()
	switch {
	case s.state != answering: // closed meanwhile by the lot
		s.mu.Unlock()
		s.close()
	case err != nil || closeAfter || s.hungUp || s.lot.isClosed():
		s.state = ended
		s.mu.Unlock()
		s.close()
	case len(s.prefix) > 0: // the next request is here already
		s.state = ended
		s.mu.Unlock()
		s.handBack()
	default:
		s.state = idle
		if d := s.lot.cfg.IdleTimeout; d > 0 {
			s.idleTimer = time.AfterFunc(d, s.closeIfIdle)
		}
		s.mu.Unlock()
		if err := s.lot.p.watch(s.fd, s.token, true, false); err != nil {
			s.closeIfIdle()
		}
	}
	return status, written
}

// event is what the poller saw on the connection.
func (s *Spot) event(ev event) {
	s.mu.Lock()
	switch s.state {
	case parked, answering:
		if s.present || s.hungUp {
			s.mu.Unlock()
			return
		}
		if ev&evReadable != 0 && s.peekable {
			// Bytes, or the end of the stream (a half-close reads as
			// readable too): net/http's background read would have taken
			// a byte of a next request and stopped looking, or seen EOF.
			switch n, err := peek(s.fd); {
			case n > 0:
				s.present = true // Finish arms the socket again
				s.mu.Unlock()
				return
			case n < 0 && err == errAgain: // nothing after all: look again
				_ = s.lot.p.watch(s.fd, s.token, true, false)
				s.mu.Unlock()
				return
			}
			ev |= evHangUp
		}
		if ev&evHangUp == 0 {
			s.mu.Unlock()
			return
		}
		s.hungUp = true
		parked := s.state == parked
		s.mu.Unlock()
		if parked {
			s.gone()
		}
	case idle:
		s.state = ended
		if s.idleTimer != nil {
			s.idleTimer.Stop()
		}
		s.mu.Unlock()
		if ev&evReadable != 0 { // a request, perhaps followed by a half-close: net/http answers it
			s.handBack()
			return
		}
		s.close()
	default:
		s.mu.Unlock()
	}
}

// closeIfIdle closes the connection if it waits for its next request: its
// idle timeout passed, or the server shuts down.
func (s *Spot) closeIfIdle() {
	s.mu.Lock()
	if s.state != idle {
		s.mu.Unlock()
		return
	}
	s.state = ended
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.mu.Unlock()
	s.close()
}

// abandon closes the connection whatever its state (the lot closes): a parked
// request is told its client is gone, and its answer will not be written.
func (s *Spot) abandon() {
	s.mu.Lock()
	prev := s.state
	s.state = ended
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	s.mu.Unlock()
	if prev == ended {
		return
	}
	s.close()
	if prev == parked {
		s.gone()
	}
}

// handBack forgets the connection and gives it to the server, with the bytes
// read ahead of it if any.
func (s *Spot) handBack() {
	s.lot.drop(s)
	c := s.conn
	if len(s.prefix) > 0 {
		c = &prefixed{Conn: c, prefix: s.prefix}
	}
	s.lot.mu.Lock()
	ln := s.lot.ln
	s.lot.mu.Unlock()
	if ln == nil || !ln.handBack(c) {
		_ = c.Close()
	}
}

func (s *Spot) close() {
	s.lot.drop(s)
	_ = s.conn.Close()
}

// recorder is the ResponseWriter of a parked request: it keeps the answer for
// Finish. Like net/http's, it sends the header as it was at WriteHeader.
type recorder struct {
	header http.Header
	snap   http.Header
	status int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status != 0 {
		return
	}
	r.status = code
	r.snap = r.header.Clone()
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.body = append(r.body, p...)
	return len(p), nil
}
