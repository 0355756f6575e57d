package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/goleak"
)

// leakWait is how long the runner's goroutines get to end after a scenario's
// topology has stopped (processes reaped, connections closed): a connection's
// reader ends once it sees the close, far sooner. It is spent only on a leak.
const leakWait = 10 * time.Second

// checkGoroutines compares the runner's goroutines with base, taken
// (goleak.IgnoreCurrent) before the scenario started: every goroutine the
// scenario started (workers, probes, process waiters, the in-process toxiproxy,
// Redis clients, HTTP connections) must have ended. The one kind the runner
// keeps on purpose is an idle keep-alive connection of http.DefaultTransport,
// which /readyz and /metrics use; those are closed first. Each leaked goroutine
// is a violation, its stack in the details.
func checkGoroutines(out *row, base goleak.Option, wait time.Duration) {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var err error
	for deadline := time.Now().Add(wait); ; {
		// Find itself retries for about a second before it reports.
		if err = goleak.Find(base); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err == nil {
		return
	}
	n := max(1, strings.Count(err.Error(), " in state "))
	out.violations += n
	out.summary += fmt.Sprintf("; %d goroutines leaked", n)
	out.details = append(out.details, fmt.Sprintf("goroutines left running after the scenario: %v", err))
}
