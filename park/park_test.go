package park_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/park"
)

// lotServer is a server wired as cmd/server wires Baton's: GET /park?id=X
// parks (answered by the test through answer), GET /plain answers at once with
// the connection's TLS state and whether the request came on a connection seen
// before.
type lotServer struct {
	t   *testing.T
	lot *park.Lot
	srv *http.Server
	url string

	mu     sync.Mutex
	parked map[string]*parkedReq
	came   chan string // ids, as they park (or fail to: "!" + id)
}

type parkedReq struct {
	spot *park.Spot
	gone chan struct{}
}

func newLotServer(t *testing.T, cfg park.Config, withTLS bool) *lotServer {
	t.Helper()
	lot, err := park.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &lotServer{t: t, lot: lot, parked: map[string]*parkedReq{}, came: make(chan string, 100)}
	mux := http.NewServeMux()
	mux.HandleFunc("/park", s.park)
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain tls=%v proto=%s", r.TLS != nil, r.Proto)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.srv = &http.Server{Handler: lot.Handler(mux), ConnContext: lot.ConnContext,
		IdleTimeout: cfg.IdleTimeout, WriteTimeout: cfg.WriteTimeout, ReadHeaderTimeout: 10 * time.Second}
	s.url = "http://" + ln.Addr().String()
	if withTLS {
		ts := httptest.NewUnstartedServer(nil) // for its certificate

		ts.EnableHTTP2 = true
		ts.StartTLS()
		tlsCfg := ts.TLS.Clone()
		ts.Close()
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
		s.srv.TLSConfig = tlsCfg
		ln = tls.NewListener(ln, tlsCfg)
		s.url = "https://" + strings.TrimPrefix(s.url, "http://")
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = s.srv.Serve(lot.Listen(ln)) }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		<-served
		lot.Close()
	})
	return s
}

func (s *lotServer) park(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	w.Header().Set("X-Request-Id", id)
	gone := make(chan struct{})
	var once sync.Once
	spot, err := s.lot.Park(w, r, true, time.Now(), func() { once.Do(func() { close(gone) }) })
	if err != nil {
		if !errors.Is(err, park.ErrNotParked) {
			s.t.Errorf("park %s: %v", id, err)
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "not parked %s", r.Proto)
		s.came <- "!" + id
		return
	}
	s.mu.Lock()
	s.parked[id] = &parkedReq{spot: spot, gone: gone}
	s.mu.Unlock()
	s.came <- id
}

// awaitParked waits for request id to park.
func (s *lotServer) awaitParked(id string) *parkedReq {
	s.t.Helper()
	select {
	case got := <-s.came:
		if got != id {
			s.t.Fatalf("%q came to the handler, want %q parked", got, id)
		}
	case <-time.After(10 * time.Second):
		s.t.Fatalf("%s never parked", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parked[id]
}

// answer writes a parked request's answer as a handler would.
func (p *parkedReq) answer(status int, body string) {
	w := p.spot.ResponseWriter()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
	p.spot.Finish()
}

func (s *lotServer) dial() net.Conn {
	s.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// send writes a GET on c.
func send(t *testing.T, c net.Conn, path string, extra ...string) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Join(extra, "") + "\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// A parked request is answered on its connection, which then serves the next
// request as a kept-alive connection does, and parks again.
func TestParkedAnswerKeepsConnection(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	c := s.dial()
	br := bufio.NewReader(c)
	for i := range 3 {
		id := fmt.Sprint("a", i)
		send(t, c, "/park?id="+id)
		s.awaitParked(id).answer(201, `{"n":1}`)
		res, body := read(t, br)
		if res.StatusCode != 201 || body != `{"n":1}` || res.Header.Get("X-Request-Id") != id || res.Close {
			t.Fatalf("parked answer %d: %d %q %v close=%v", i, res.StatusCode, body, res.Header, res.Close)
		}
		send(t, c, "/plain")
		if res, body := read(t, br); res.StatusCode != 200 || body != "plain tls=false proto=HTTP/1.1" {
			t.Fatalf("next request on the connection: %d %q", res.StatusCode, body)
		}
	}
}

// Requests the client sent behind a parked one (pipelining) are answered after
// it, in order, by the server.
func TestPipelinedAfterParked(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	c := s.dial()
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /park?id=p HTTP/1.1\r\nHost: x\r\n\r\nGET /plain HTTP/1.1\r\nHost: x\r\n\r\nGET /park?id=q HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	s.awaitParked("p").answer(200, "first")
	if _, body := read(t, br); body != "first" {
		t.Fatalf("first answer %q", body)
	}
	if _, body := read(t, br); !strings.HasPrefix(body, "plain") {
		t.Fatalf("second answer %q", body)
	}
	s.awaitParked("q").answer(200, "third")
	if _, body := read(t, br); body != "third" {
		t.Fatalf("third answer %q", body)
	}
}

// A client that closes, half-closes or resets its connection while parked is
// reported gone; its answer, written anyway, goes nowhere, and the lot lets
// go of the connection.
func TestHangUpWhileParked(t *testing.T) {
	for _, how := range []string{"close", "half-close", "reset"} {
		t.Run(how, func(t *testing.T) {
			s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
			c := s.dial()
			send(t, c, "/park?id=h")
			p := s.awaitParked("h")
			switch how {
			case "close":
				c.Close()
			case "half-close":
				_ = c.(*net.TCPConn).CloseWrite()
			case "reset":
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			select {
			case <-p.gone:
			case <-time.After(10 * time.Second):
				t.Fatal("hang-up not reported")
			}
			p.answer(503, "nobody reads this")
			awaitHeld(t, s.lot, 0)
		})
	}
}

// Once answered, a connection waits for its next request without net/http:
// a client that closes it then, or stays silent past the idle timeout, has it
// closed.
func TestIdleAfterAnswer(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: 300 * time.Millisecond}, false)
	c := s.dial()
	br := bufio.NewReader(c)
	send(t, c, "/park?id=i")
	s.awaitParked("i").answer(200, "ok")
	read(t, br)
	if _, err := br.ReadByte(); err != io.EOF { // the server closes at the idle timeout
		t.Fatalf("read on an idle connection: %v, want EOF", err)
	}
	awaitHeld(t, s.lot, 0)

	c2 := s.dial()
	send(t, c2, "/park?id=j")
	s.awaitParked("j").answer(200, "ok")
	read(t, bufio.NewReader(c2))
	c2.Close()
	awaitHeld(t, s.lot, 0)
}

// Connection: close and HTTP/1.0 answers end the connection, as net/http's do.
func TestCloseAfterAnswer(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	c := s.dial()
	br := bufio.NewReader(c)
	send(t, c, "/park?id=c", "Connection: close\r\n")
	s.awaitParked("c").answer(200, "bye")
	res, body := read(t, br)
	if body != "bye" || !res.Close {
		t.Fatalf("answer %q close=%v, want Connection: close", body, res.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after a Connection: close answer: %v, want EOF", err)
	}
}

// Over TLS, the parked answer is encrypted on the same TLS connection, whose
// next requests (also pipelined ones) still carry their TLS state; HTTP/2
// requests do not park and are answered as before.
func TestTLS(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, true)
	addr := strings.TrimPrefix(s.url, "https://")
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send(t, c, "/park?id=t")
	s.awaitParked("t").answer(200, "secret")
	if _, body := read(t, br); body != "secret" {
		t.Fatalf("parked answer over TLS: %q", body)
	}
	send(t, c, "/plain")
	if _, body := read(t, br); body != "plain tls=true proto=HTTP/1.1" {
		t.Fatalf("next request on the TLS connection: %q", body)
	}
	if _, err := io.WriteString(c, "GET /park?id=u HTTP/1.1\r\nHost: x\r\n\r\nGET /plain HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	s.awaitParked("u").answer(200, "again")
	if _, body := read(t, br); body != "again" {
		t.Fatalf("parked answer: %q", body)
	}
	if _, body := read(t, br); body != "plain tls=true proto=HTTP/1.1" {
		t.Fatalf("pipelined request behind a parked one over TLS: %q", body)
	}

	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	defer h2.CloseIdleConnections()
	res, err := h2.Get(s.url + "/park?id=v")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 || string(body) != "not parked HTTP/2.0" {
		t.Fatalf("HTTP/2 request: %s %q, want it answered by net/http", res.Proto, body)
	}
	if got := <-s.came; got != "!v" {
		t.Fatalf("handler saw %q", got)
	}
}

// A writer that is not net/http's does not park.
func TestNotHijackable(t *testing.T) {
	lot, err := park.New(park.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lot.Close()
	r := httptest.NewRequest("GET", "/", nil)
	if _, err := lot.Park(httptest.NewRecorder(), r, true, time.Now(), func() {}); !errors.Is(err, park.ErrNotParked) {
		t.Fatalf("park on a recorder: %v, want ErrNotParked", err)
	}
}

// When the server shuts down, parked answers are still written, with
// Connection: close, and their connections closed; idle ones are closed at
// once; Shutdown waits for the answers, and nothing parks any more.
func TestShutdown(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	const n = 50
	conns := make([]*bufio.Reader, n)
	var ps []*parkedReq
	for i := range n {
		c := s.dial()
		conns[i] = bufio.NewReader(c)
		send(t, c, fmt.Sprint("/park?id=s", i))
		ps = append(ps, s.awaitParked(fmt.Sprint("s", i)))
	}
	idle := s.dial()
	send(t, idle, "/park?id=idle")
	s.awaitParked("idle").answer(200, "done")
	ibr := bufio.NewReader(idle)
	read(t, ibr)

	shut := make(chan error, 1)
	go func() { shut <- s.srv.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection at shutdown: %v, want EOF", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	lotDone := make(chan error, 1)
	go func() { lotDone <- s.lot.Shutdown(context.Background()) }()
	for i, p := range ps {
		p.answer(202, "still waiting")
		res, body := read(t, conns[i])
		if res.StatusCode != 202 || body != "still waiting" || !res.Close {
			t.Fatalf("answer %d at shutdown: %d %q close=%v", i, res.StatusCode, body, res.Close)
		}
	}
	if err := <-lotDone; err != nil {
		t.Fatal(err)
	}
	awaitHeld(t, s.lot, 0)
}

// Close abandons what is parked: its requests are told their client is gone,
// and answers written later are dropped.
func TestCloseAbandons(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	c := s.dial()
	send(t, c, "/park?id=x")
	p := s.awaitParked("x")
	s.lot.Close()
	<-p.gone
	p.answer(200, "late")
	if _, err := bufio.NewReader(c).ReadByte(); err != io.EOF {
		t.Fatalf("read after Close: %v, want EOF", err)
	}
}

func awaitHeld(t *testing.T, lot *park.Lot, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); lot.Held() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("lot holds %d connections, want %d", lot.Held(), n)
		}
		time.Sleep(5 * time.Millisecond) // the lot announces nothing
	}
}

// Close while requests are parking: each one either is not parked, or is
// parked and told its client is gone; none is left watched or half made.
func TestCloseWhileParking(t *testing.T) {
	s := newLotServer(t, park.Config{IdleTimeout: time.Minute}, false)
	const n = 40
	for i := range n {
		c := s.dial()
		go func() { _, _ = io.WriteString(c, fmt.Sprintf("GET /park?id=r%d HTTP/1.1\r\nHost: x\r\n\r\n", i)) }()
	}
	<-s.came // one has parked: close while the others come in
	s.lot.Close()
	s.mu.Lock()
	parked := make([]*parkedReq, 0, len(s.parked))
	for _, p := range s.parked {
		parked = append(parked, p)
	}
	s.mu.Unlock()
	for _, p := range parked {
		select {
		case <-p.gone:
		case <-time.After(10 * time.Second):
			t.Fatal("a request parked before Close was not told its client is gone")
		}
	}
	if n := s.lot.Held(); n != 0 {
		t.Fatalf("lot holds %d connections after Close", n)
	}
}
