package main

import (
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
