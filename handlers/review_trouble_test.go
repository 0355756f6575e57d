package handlers_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/lua"
)

// Hostile review: Redis and network trouble around tickets and pub/sub.

// stalled is how many connections stallSubscribe has stalled.
func (px *proxy) stalled() int {
	px.mu.Lock()
	defer px.mu.Unlock()
	n := 0
	for p := range px.pipes {
		if p.stalled.Load() {
			n++
		}
	}
	return n
}

// A ticket is granted and its lease delivered (poll: 200, ttl_ms 60000). The
// client polls the ticket URL once more and hangs up before that poll answers
// (here: while it waits for its subscription, which a stalled pub/sub
// connection never confirms; in general whenever a re-poll's client goes away).
// The store undoes "the poll's grant": unpoll.lua finds a hold of count 1 with
// more than the ticket ttl left and cuts it to the ticket ttl, marked
// unclaimed, though this poll claimed nothing and the client holds the lease
// with 60 s on it. The lease ends a second later; another client is granted
// the lock while the first still believes it holds it for a minute.
func TestReviewAbandonedRepollCutsHeldLease(t *testing.T) {
	const tt = time.Second
	srv := redistest.Start(t)
	px := startProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL(), TicketTTL: tt})
	h := e.acquire("repoll", map[string]any{"ttl_ms": 30000, "owner": "H"})
	q := e.enqueue("repoll", map[string]any{"ttl_ms": 60000, "owner": "T"})
	wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
	l := e.poll(q.Str("url"), 0)
	wantStatus(t, l, http.StatusOK, "")
	if l.Int("ttl_ms") < 50000 {
		t.Fatalf("granted lease %s, want ttl_ms about 60000", l.Raw)
	}

	px.stallSubscribe.Store(true)
	ctx, hangUp := context.WithCancel(context.Background())
	again := e.send(req{Method: "GET", Path: q.Str("url") + "?wait_ms=5000", Context: ctx})
	pollUntil(t, 5*time.Second, "the re-poll's SUBSCRIBE stalled", func() bool { return px.stalled() == 1 })
	hangUp()
	<-again
	px.stallSubscribe.Store(false)
	pollUntil(t, 5*time.Second, "the abandoned re-poll undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("unclaimed"))+
			testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("kept")) >= 1
	})

	got := e.do(req{Method: "GET", Path: l.Str("url")})
	wantStatus(t, got, http.StatusOK, "")
	if got.Int("ttl_ms") < 50000 {
		t.Errorf("after a re-poll was abandoned, the delivered lease has ttl_ms %d, want about 60000 (nothing it was told changed)", got.Int("ttl_ms"))
	}
	time.Sleep(tt + 500*time.Millisecond) // past the ticket ttl
	if r := e.do(req{Method: "GET", Path: l.Str("url")}); r.Status != http.StatusOK {
		t.Errorf("lease told ttl_ms %d is %d %s after %v", l.Int("ttl_ms"), r.Status, r.Str("type"), tt+500*time.Millisecond)
	}
	if r := e.do(req{Method: "POST", Path: "/v1/locks/repoll", Body: map[string]any{"owner": "other"}}); r.Status != http.StatusLocked {
		t.Errorf("another client's acquire: %d, want 423 (T holds the lock for 60 s): two clients believe they hold it", r.Status)
	}
}

// The pub/sub connection goes half-dead: what Baton sends on it is no longer
// forwarded (a SUBSCRIBE, the barrier ping, the health-check ping), while what
// Redis sends still arrives, because another lock's channel has traffic. The
// health check (receive) resets its unanswered ping on any message, so the
// connection is never taken for dead and never replaced; a new waiter's
// channel is never confirmed, so the waiter never makes its first check and
// arms no timer: it sleeps through the holder's lease end until its wait is
// over. (Once the stall begins, a fresh connection would work again.)
func TestReviewHalfDeadPubSubNeverReplaced(t *testing.T) {
	srv := redistest.Start(t)
	px := startProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL()})
	e.acquire("busy", map[string]any{"ttl_ms": 60000})
	e.parkWaiter("busy", map[string]any{"wait_ms": 30000})

	// Traffic on the busy lock's channel: the 'c' that Baton publishes whenever
	// a shared hold ends while the queue waits (here sent directly).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				e.Redis.Publish(context.Background(), e.lockKey("busy")+":ev", "c")
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })

	h := e.acquire("new", map[string]any{"ttl_ms": 1000, "owner": "H"})
	px.stallSubscribe.Store(true)
	w := e.send(req{Method: "POST", Path: "/v1/locks/new", Body: map[string]any{"wait_ms": 9000, "owner": "W"}})
	pollUntil(t, 5*time.Second, "the new waiter's SUBSCRIBE stalled", func() bool { return px.stalled() == 1 })
	px.stallSubscribe.Store(false)

	end := parseStamp(t, h.Str("expires_at"))
	got := awaitAnswer(t, w, 20*time.Second)
	if got.r.Status != http.StatusCreated {
		t.Fatalf("waiter W: %d %v after the lease ran out, want 201 once the dead connection is replaced (a few seconds)\n%s",
			got.r.Status, got.at.Sub(end).Round(time.Millisecond), got.r.Raw)
	}
	if late := got.at.Sub(end); late > 5*time.Second {
		t.Errorf("lease end -> grant %v with a half-dead pub/sub connection", late)
	}
}

// delayProxy forwards between Baton and Redis and, while armed, holds back a
// connection's commands from the first one that contains pattern on: they are
// kept (the client times out and closes its side) and reach Redis only on
// deliver, as a command delayed in the network does.
type delayProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	pattern []byte
	held    []*heldConn
	conns   []net.Conn
	wg      sync.WaitGroup
}

type heldConn struct {
	server net.Conn
	mu     sync.Mutex
	buf    bytes.Buffer
	gone   bool // delivered: forward directly
}

func startDelayProxy(t *testing.T, target string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &delayProxy{ln: ln, target: target}
	px.wg.Add(1)
	go px.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		px.mu.Lock()
		for _, c := range px.conns {
			_ = c.Close()
		}
		px.mu.Unlock()
		px.wg.Wait()
	})
	return px
}

func (px *delayProxy) URL() string { return "redis://" + px.ln.Addr().String() + "/0" }

func (px *delayProxy) arm(pattern []byte) {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.pattern = pattern
}

// heldCount is how many connections are held back.
func (px *delayProxy) heldCount() int {
	px.mu.Lock()
	defer px.mu.Unlock()
	return len(px.held)
}

// deliver disarms the proxy and sends everything held back to Redis.
func (px *delayProxy) deliver() {
	px.mu.Lock()
	px.pattern = nil
	held := px.held
	px.held = nil
	px.mu.Unlock()
	for _, h := range held {
		h.mu.Lock()
		_, _ = h.server.Write(h.buf.Bytes())
		h.buf.Reset()
		h.gone = true
		h.mu.Unlock()
	}
}

func (px *delayProxy) serve() {
	defer px.wg.Done()
	for {
		c, err := px.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", px.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		px.mu.Lock()
		px.conns = append(px.conns, c, s)
		px.mu.Unlock()
		px.wg.Add(2)
		go px.up(c, s)
		go func() { // replies; those of held commands reach a client that left
			defer px.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					_, _ = c.Write(buf[:n])
				}
				if err != nil {
					_ = c.Close()
					return
				}
			}
		}()
	}
}

func (px *delayProxy) up(c, s net.Conn) {
	defer px.wg.Done()
	var h *heldConn
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			px.mu.Lock()
			if h == nil && px.pattern != nil && bytes.Contains(buf[:n], px.pattern) {
				h = &heldConn{server: s}
				px.held = append(px.held, h)
			}
			px.mu.Unlock()
			if h != nil {
				h.mu.Lock()
				if h.gone {
					_, _ = s.Write(buf[:n])
				} else {
					h.buf.Write(buf[:n])
				}
				h.mu.Unlock()
			} else if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if h == nil {
				_ = s.Close()
			}
			// A held connection's server side stays open until deliver
			// (its replies go nowhere); the cleanup closes it.
			return
		}
	}
}

// A ticket poll's script is delayed in the network past the store's 2 s read
// timeout (and its one retry): the client gets 503, the store undoes the poll
// (unpoll.lua: not polled any more, alive for the ticket ttl), and the client
// goes away. Then the delayed poll reaches Redis and runs: it marks the ticket
// as polled for the poll's whole wait, and keeps it alive as long. There is no
// tombstone for a poll, as there is for an acquire. When the holder releases,
// the handoff takes the ticket for a polling waiter and grants it at its full
// ttl, claimed, to nobody. API: a grant to a waiter that is not polling is kept
// for at most ticket_ttl_ms, then passes on. Here the next waiter waits for
// the whole 60 s lease of a client that left.
func TestReviewLatePollAfterItsUndo(t *testing.T) {
	const tt = 6 * time.Second // outlives the failed poll's two attempts of 2 s
	srv := redistest.Start(t)
	px := startDelayProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL(), TicketTTL: tt})
	e.awaitReady() // scripts loaded: EVALSHA, no EVAL
	h := e.acquire("late", map[string]any{"ttl_ms": 30000, "owner": "H"})
	q := e.enqueue("late", map[string]any{"ttl_ms": 60000, "owner": "T"})
	tkey := e.lockKey("late") + ":t:" + idHash(q.Str("ticket"))

	px.arm([]byte(lua.Build(lua.Defaults).Func["poll"]))
	r := e.do(req{Method: "GET", Path: q.Str("url") + "?wait_ms=20000"})
	wantStatus(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if px.heldCount() == 0 {
		t.Fatal("no poll was held back: the test proves nothing")
	}
	pollUntil(t, 5*time.Second, "the failed poll undone", func() bool {
		return testutil.ToFloat64(e.Metrics.Undos.WithLabelValues("queued")) >= 1
	})
	base := scriptCalls(t, e)
	n := px.heldCount()
	px.deliver()
	e.awaitCalls(base + n) // the delayed poll reached Redis (and, undone, changed nothing)
	ctx := context.Background()
	if life := e.Redis.PTTL(ctx, tkey).Val(); life > 2*tt {
		t.Errorf("the ticket of a client that left lives %v, want at most the ticket ttl %v", life.Round(time.Second), tt)
	}

	w := e.parkWaiter("late", map[string]any{"wait_ms": 10000, "owner": "W"})
	released := time.Now()
	wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
	got := awaitAnswer(t, w, 15*time.Second)
	if got.r.Status != http.StatusCreated || got.at.Sub(released) > tt+1500*time.Millisecond {
		st := e.do(req{Method: "GET", Path: "/v1/locks/late"})
		t.Errorf("waiter W: %d %v after the release, want 201 within the ticket ttl (%v): the grant to T, whose client left, should have passed on\nlock: %s",
			got.r.Status, got.at.Sub(released).Round(time.Millisecond), tt, st.Raw)
	}
}
