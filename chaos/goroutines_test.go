package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestCheckGoroutinesReportsALeakWithItsStack(t *testing.T) {
	base := goleak.IgnoreCurrent()
	var clean row
	checkGoroutines(&clean, base, 0)
	if clean.violations != 0 {
		t.Fatalf("no leak: violations %d, details %q", clean.violations, clean.details)
	}

	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go leakyWorker(stop)
	var out row
	checkGoroutines(&out, base, 0)
	if out.violations != 1 || len(out.details) != 1 || !strings.Contains(out.details[0], "leakyWorker") {
		t.Fatalf("one leak: violations %d, details %q; want 1 naming leakyWorker", out.violations, out.details)
	}
}

func leakyWorker(stop chan struct{}) { <-stop }

// The one kind of goroutine the check lets pass is a toxic toxiproxy stranded
// itself (toxiproxyStub), and it says so; a proxy left running is a leak. The
// stranding is made as in the net-* scenarios, only surer: an upstream that
// writes without pause to a client that resets its connection, so that the
// proxy's writer to the client fails while its noop toxic holds the next chunk.
// Should toxiproxy stop stranding them, the first half fails, and the exception
// in checkGoroutines can go.
func TestCheckGoroutinesToleratesOnlyToxiproxysStrandedToxics(t *testing.T) {
	base := goleak.IgnoreCurrent()
	upstream := floodServer(t)
	p, err := startNetProxy(upstream.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		c, err := net.Dial("tcp", p.p.Listen)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close with a reset
		_ = c.Close()
	}
	p.stop()
	_ = upstream.Close()

	var out row
	checkGoroutines(&out, base, leakWait)
	if out.violations != 0 {
		t.Fatalf("stopped proxy: violations %d, details %q; want none", out.violations, out.details)
	}
	if len(out.details) != 1 || !strings.Contains(out.details[0], "toxiproxy stranded") {
		t.Fatalf("stopped proxy: details %q; want the note on toxiproxy's stranded toxics", out.details)
	}

	running, err := startNetProxy(upstream.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(running.stop)
	var leak row
	checkGoroutines(&leak, base, 0)
	if leak.violations == 0 || !strings.Contains(strings.Join(leak.details, "\n"), "toxiproxy") {
		t.Fatalf("running proxy: violations %d, details %q; want its goroutines reported", leak.violations, leak.details)
	}
}

// floodServer accepts connections and writes to each without pause until the
// write fails. Closing the listener ends it once its connections have failed.
func floodServer(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 32<<10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l
}

// The check of a Baton process's goroutines, against a stand-in process: this
// test's own runtime profiles served as BATON_DEBUG_ADDR serves them. A goroutine
// started after the baseline is reported with its stack until it ends; the
// goroutines serving the profile itself never are. Here the client asking is in
// the same process, so the goroutines of its connection are in the profile too;
// serverSide leaves them out (a Baton process has no HTTP client).
func TestBatonGoroutinesAgainstTheBaseline(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b := &baton{name: "T", debug: srv.URL}
	idle, err := b.goroutines(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b.idle = map[int]bool{}
	for _, g := range idle {
		if strings.Contains(g.stack, "net/http/pprof.") {
			t.Fatalf("the profile's own goroutine is in the baseline:\n%s", g.stack)
		}
		b.idle[g.id] = true
	}

	stop := make(chan struct{})
	go leakyWorker(stop)
	left, err := b.leftGoroutines(t.Context(), time.Second, noExtra)
	if left = serverSide(left); err != nil || len(left) != 1 || !strings.Contains(left[0].stack, "leakyWorker") {
		t.Fatalf("one goroutine started after the baseline: got %d (%v): %v", len(left), err, left)
	}

	close(stop)
	left, err = b.leftGoroutines(t.Context(), time.Second, noExtra)
	if left = serverSide(left); err != nil || len(left) != 0 {
		t.Fatalf("after it ended: %v %v", left, err)
	}
}

func noExtra([]goroutine) map[int]bool { return nil }

// A pub/sub link's goroutines are those labelled as its reader and its
// writer; nothing else is taken for one, whatever its stack says.
func TestLinkGoroutines(t *testing.T) {
	dump := "goroutine 86 [IO wait labels:{\"baton\": \"pubsub-reader\"}]:\nruntime.gopark(0x1)\n\t/p.go:1 +0x1\n" +
		"created by runtime/pprof.Do in goroutine 84\n\t/d.go:180 +0x1d3\n\n" +
		"goroutine 87 [select labels:{\"baton\": \"pubsub-writer\"}]:\nruntime.gopark(0x1)\n\t/p.go:1 +0x1\n" +
		"created by runtime/pprof.Do in goroutine 84\n\t/d.go:181 +0x225\n\n" +
		"goroutine 90 [select]:\ngithub.com/batonhq/baton/store.(*dispatcher).write(0x1, 0x3)\n\t/d.go:424 +0xe9\n" +
		"created by github.com/batonhq/baton/store.(*dispatcher).newLink in goroutine 84\n\t/d.go:181 +0x225\n\n" +
		"goroutine 91 [select labels:{\"baton\": \"wait-step\"}]:\nmain.leaky()\n\t/h.go:1 +0x1\n" +
		"created by runtime/pprof.Do in goroutine 84\n\t/d.go:182 +0x2\n"
	ids, readers, writers := linkGoroutines(parseGoroutines(dump))
	if readers != 1 || writers != 1 || len(ids) != 2 || !ids[86] || !ids[87] {
		t.Fatalf("links' goroutines %v, %d readers, %d writers; want 86 and 87, one of each", ids, readers, writers)
	}
}

func serverSide(gs []goroutine) []goroutine {
	var out []goroutine
	for _, g := range gs {
		if !strings.Contains(g.stack, "net/http.(*Transport).dialConn") {
			out = append(out, g)
		}
	}
	return out
}

func TestParseGoroutines(t *testing.T) {
	dump := "goroutine 7 [running]:\nmain.f()\n\t/x.go:1 +0x1\ncreated by main.g in goroutine 1\n\t/x.go:2 +0x2\n\n" +
		"goroutine 9 [chan receive, 2 minutes]:\nmain.h()\n\t/x.go:3 +0x3\n\nnot a goroutine\n"
	gs := parseGoroutines(dump)
	if len(gs) != 2 || gs[0].id != 7 || gs[1].id != 9 || creator(gs[0].stack) != 1 || creator(gs[1].stack) != -1 {
		t.Fatalf("parsed %+v", gs)
	}
}

// A Baton started again while the workload runs is ready with requests in
// flight: its baseline leaves out the goroutines serving connections and those
// they started, so that any of them still there at the end is reported. The
// goroutine serving a profile is left out of every reading, and only it and
// what it started: the main goroutine, created by nobody, stays.
func TestBaselineLeavesOutRequests(t *testing.T) {
	dump := "goroutine 1 [select]:\nmain.serve()\n\t/m.go:1 +0x1\nmain.main()\n\t/m.go:2 +0x2\n\n" +
		"goroutine 40 [IO wait]:\nnet/http.(*conn).serve(0xc000)\n\t/s.go:1 +0x1\ncreated by net/http.(*Server).Serve in goroutine 24\n\t/s.go:2 +0x2\n\n" +
		"goroutine 41 [chan receive]:\nmain.leaky()\n\t/h.go:1 +0x1\ncreated by main.handler in goroutine 40\n\t/h.go:2 +0x2\n\n" +
		"goroutine 24 [IO wait]:\nnet/http.(*Server).Serve(0xc000)\n\t/s.go:3 +0x3\ncreated by main.serve in goroutine 1\n\t/m.go:3 +0x3\n\n" +
		"goroutine 50 [running]:\nnet/http/pprof.handler.ServeHTTP()\n\t/p.go:1 +0x1\nnet/http.(*conn).serve(0xc001)\n\t/s.go:1 +0x1\ncreated by net/http.(*Server).Serve in goroutine 30\n\t/s.go:2 +0x2\n\n" +
		"goroutine 51 [IO wait]:\nnet/http.(*connReader).backgroundRead()\n\t/s.go:4 +0x4\ncreated by net/http.(*connReader).startBackgroundRead in goroutine 50\n\t/s.go:5 +0x5\n"
	ids := func(gs []goroutine) []int {
		var out []int
		for _, g := range gs {
			out = append(out, g.id)
		}
		return out
	}
	read := othersThanProfiler(parseGoroutines(dump))
	if got := ids(read); len(got) != 4 || got[0] != 1 || got[1] != 40 || got[2] != 41 || got[3] != 24 {
		t.Fatalf("a reading: %v, want [1 40 41 24]", got)
	}
	if got := ids(notServingRequests(read)); len(got) != 2 || got[0] != 1 || got[1] != 24 {
		t.Fatalf("a baseline: %v, want [1 24]", got)
	}
}
