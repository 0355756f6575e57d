package main

import (
	"io"
	"net"
	"strings"
	"testing"

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
