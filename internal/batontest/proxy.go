package batontest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultProxy is an HTTP proxy in front of a Server that injects the faults a
// client must survive, driven over HTTP so that tests in any language can use
// it. Control requests (POST to ControlURL + path, parameters in the query):
//
//	/cut?n=N[&path=P][&method=M]      the next N matching requests reach Baton, and the
//	                                  client's connection is closed before any answer:
//	                                  the answer is lost
//	/timeout?ms=T[&n=N][&path=P]      matching requests that Baton does not answer within
//	                                  T ms get 504, as from nginx (the upstream request
//	                                  is cancelled); n: for the next N only (default all)
//	/status?code=C[&n=N][&path=P][&retry_after=S][&type=K]
//	                                  the next N matching requests are answered C at
//	                                  once (a problem+json body of type /problems/K,
//	                                  default store-unavailable), not forwarded
//	/down?on=1|0                      while on, every connection is closed at once
//	/reset                            no faults
//	GET /count[?path=P]               {"requests": n}: requests seen (matching P)
//
// P is a path prefix, M a method; both match anything when absent.
type FaultProxy struct {
	URL, ControlURL string

	target *url.URL
	rp     *httputil.ReverseProxy

	mu     sync.Mutex
	faults []*fault
	down   bool
	seen   []string // "METHOD path" of every proxied request
}

type fault struct {
	kind         string // cut, timeout, status
	n            int    // matching requests left; -1: all
	path, method string
	ms           int
	code         int
	retryAfter   string
	problem      string // status: the problem's kind (its type is /problems/<kind>)
}

func (f *fault) matches(r *http.Request) bool {
	return (f.path == "" || strings.HasPrefix(r.URL.Path, f.path)) && (f.method == "" || strings.EqualFold(f.method, r.Method))
}

func startFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: target}
	p := &FaultProxy{target: u, rp: httputil.NewSingleHostReverseProxy(u)}
	p.rp.FlushInterval = -1
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.URL, p.ControlURL = "http://"+ln.Addr().String(), "http://"+cln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	ctl := &http.Server{Handler: http.HandlerFunc(p.control), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { _ = ctl.Serve(cln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = ctl.Close() })
	return p
}

// take returns the first fault matching r, counting it down.
func (p *FaultProxy) take(r *http.Request) *fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, r.Method+" "+r.URL.Path)
	for i, f := range p.faults {
		if !f.matches(r) {
			continue
		}
		if f.n > 0 {
			f.n--
			if f.n == 0 {
				p.faults = append(p.faults[:i:i], p.faults[i+1:]...)
			}
		}
		return f
	}
	return nil
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		hijackClose(w)
		return
	}
	f := p.take(r)
	switch {
	case f == nil:
		p.rp.ServeHTTP(w, r)
	case f.kind == "status":
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(f.code)
		_, _ = w.Write([]byte(`{"type":"/problems/` + f.problem + `","title":"Injected","status":` + strconv.Itoa(f.code) + `,"detail":"injected by the test proxy"}`))
	case f.kind == "cut":
		rec := &discard{header: http.Header{}}
		p.rp.ServeHTTP(rec, r) // Baton answers; the answer goes nowhere
		hijackClose(w)
	case f.kind == "timeout":
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(f.ms)*time.Millisecond)
		defer cancel()
		rec := &discard{header: http.Header{}}
		done := make(chan struct{})
		go func() { p.rp.ServeHTTP(rec, r.WithContext(ctx)); close(done) }()
		select {
		case <-done:
			if ctx.Err() == nil {
				copyAnswer(w, rec)
				return
			}
		case <-ctx.Done():
			<-done
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = w.Write([]byte("<html><body><h1>504 Gateway Time-out</h1></body></html>"))
	}
}

func (p *FaultProxy) control(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := -1
	if v := q.Get("n"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	f := &fault{n: n, path: q.Get("path"), method: q.Get("method")}
	switch strings.TrimPrefix(r.URL.Path, "/") {
	case "cut":
		f.kind = "cut"
		if f.n < 0 {
			f.n = 1
		}
	case "timeout":
		f.kind = "timeout"
		f.ms, _ = strconv.Atoi(q.Get("ms"))
	case "status":
		f.kind = "status"
		f.code, _ = strconv.Atoi(q.Get("code"))
		f.retryAfter = q.Get("retry_after")
		if f.problem = q.Get("type"); f.problem == "" || strings.ContainsAny(f.problem, `"\\`) {
			f.problem = "store-unavailable"
		}
		if f.n < 0 {
			f.n = 1
		}
	case "down":
		p.mu.Lock()
		p.down = q.Get("on") == "1"
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	case "reset":
		p.mu.Lock()
		p.faults, p.down = nil, false
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	case "count":
		p.mu.Lock()
		c := 0
		for _, s := range p.seen {
			if _, path, _ := strings.Cut(s, " "); strings.HasPrefix(path, q.Get("path")) {
				c++
			}
		}
		p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]int{"requests": c})
		return
	default:
		http.Error(w, "unknown control", http.StatusNotFound)
		return
	}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Cut, Timeout, Status, Down and Reset are the control requests, for Go tests.
func (p *FaultProxy) Cut(n int, path string) { p.ctl("cut", "n", strconv.Itoa(n), "path", path) }

// Timeout answers 504 to matching requests not answered within d.
func (p *FaultProxy) Timeout(d time.Duration, path string) {
	p.ctl("timeout", "ms", strconv.FormatInt(d.Milliseconds(), 10), "path", path)
}

// Status answers the next n matching requests with code (a store-unavailable
// problem).
func (p *FaultProxy) Status(code, n int, path string) {
	p.ctl("status", "code", strconv.Itoa(code), "n", strconv.Itoa(n), "path", path, "retry_after", "1")
}

// Problem answers the next n matching requests with code and a problem of
// type /problems/kind.
func (p *FaultProxy) Problem(code int, kind string, n int, path string) {
	p.ctl("status", "code", strconv.Itoa(code), "n", strconv.Itoa(n), "path", path, "retry_after", "1", "type", kind)
}

// Down closes every connection while on.
func (p *FaultProxy) Down(on bool) {
	v := "0"
	if on {
		v = "1"
	}
	p.ctl("down", "on", v)
}

// Reset clears every fault.
func (p *FaultProxy) Reset() { p.ctl("reset") }

// Count is the number of requests the proxy saw whose path starts with prefix.
func (p *FaultProxy) Count(prefix string) int {
	r, err := http.Get(p.ControlURL + "/count?path=" + url.QueryEscape(prefix))
	if err != nil {
		return -1
	}
	defer r.Body.Close()
	var v map[string]int
	_ = json.NewDecoder(r.Body).Decode(&v)
	return v["requests"]
}

func (p *FaultProxy) ctl(what string, kv ...string) {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	r, err := http.Post(p.ControlURL+"/"+what+"?"+q.Encode(), "text/plain", nil)
	if err == nil {
		r.Body.Close()
	}
}

// hijackClose closes the client's connection without an answer.
func hijackClose(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as from a dying proxy
		}
		_ = c.Close()
	}
}

// discard is a ResponseWriter that keeps the answer for copyAnswer.
type discard struct {
	header http.Header
	code   int
	body   []byte
}

func (d *discard) Header() http.Header { return d.header }
func (d *discard) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}
func (d *discard) Write(b []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	d.body = append(d.body, b...)
	return len(b), nil
}

func copyAnswer(w http.ResponseWriter, d *discard) {
	for k, v := range d.header {
		w.Header()[k] = v
	}
	w.WriteHeader(d.code)
	_, _ = w.Write(d.body)
}
