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

// toxiproxy (v2.5.0, and v2.12.0 still) strands a link's goroutines for good
// when the link's writer stops on a write error (the peer it writes to has
// gone) while its toxic still has a chunk to hand it: ToxicLink.write returns
// without draining its channel, the toxic blocks sending to it (a goroutine in
// toxiproxyStub), and the link's reader, once it has read more from the other
// peer, blocks sending to the toxic (toxiproxyChanWrite on top) and never reads
// the connection again, so not even stopping the proxy frees them. Nothing
// outside toxiproxy can reach those channels. These goroutines are counted and
// reported, not judged: they belong to the test's network and hold nothing of
// Baton's or of the runner's. A proxy left running is still a leak: its
// listener and its readers wait in the network, not on those channels.
const (
	toxiproxyStub      = "github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"
	toxiproxyChanWrite = "github.com/Shopify/toxiproxy/v2/stream.(*ChanWriter).Write"
)

// checkGoroutines compares the runner's goroutines with base, taken
// (goleak.IgnoreCurrent) before the scenario started: every goroutine the
// scenario started (workers, probes, process waiters, the in-process toxiproxy,
// Redis clients, HTTP connections) must have ended, but for what toxiproxy
// strands of itself (toxiproxyStub). The one kind the runner keeps on purpose is an idle
// keep-alive connection of http.DefaultTransport, which /readyz and /metrics
// use; those are closed first. Each leaked goroutine is a violation, its stack
// in the details.
func checkGoroutines(out *row, base goleak.Option, wait time.Duration) {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var err error
	for deadline := time.Now().Add(wait); ; {
		// Find itself retries for about a second before it reports.
		if err = goleak.Find(base, goleak.IgnoreAnyFunction(toxiproxyStub),
			goleak.IgnoreTopFunction(toxiproxyChanWrite)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		n := countGoroutines(err)
		out.violations += n
		out.summary += fmt.Sprintf("; %d goroutines leaked", n)
		out.details = append(out.details, fmt.Sprintf("goroutines left running after the scenario: %v", err))
	}
	if all := goleak.Find(base); all != nil {
		if n := countGoroutines(all) - countGoroutines(err); n > 0 {
			out.details = append(out.details, fmt.Sprintf("note: toxiproxy stranded %d goroutines of its own links "+
				"(its link writer stops on a write error without draining; not counted)", n))
		}
	}
}

// countGoroutines is how many goroutines a goleak error lists; 0 for nil.
func countGoroutines(err error) int {
	if err == nil {
		return 0
	}
	return max(1, strings.Count(err.Error(), " in state "))
}
