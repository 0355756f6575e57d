package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/internal/redistest"
)

// leakWait is how long goroutines get to end: the runner's after a scenario's
// topology has stopped (processes reaped, connections closed), a Baton's after
// the workload has ended. A connection's reader ends once it sees the close, far
// sooner; the wait is spent in full only on a leak.
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
// strands of itself (toxiproxyStub), which are counted apart. Each leaked
// goroutine is a violation, its stack in the details.
func checkGoroutines(out *row, base goleak.Option, wait time.Duration) {
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

// checkBatonGoroutines checks that each Baton process still running has come
// back to the goroutines it had once ready after its latest start (baton.idle),
// now that the workload has ended, its requests are answered or abandoned and
// the runner's idle connections are closed: a goroutine per request, waiter,
// lease or pub/sub subscription that outlives it is a leak. goleak cannot look
// into another process; its goroutine profile (BATON_DEBUG_ADDR) can, with the
// same rule: any goroutine not there at the baseline is a leak once it has had
// wait to end. Each is a violation, its stack in the details.
//
// On a Redis Cluster a Baton keeps a pub/sub link per master (two goroutines)
// from the first time one of its locks' channels is on that master, after the
// baseline (clusterLinks): those are not counted, so long as they are what the
// links of a sound store take.
func checkBatonGoroutines(ctx context.Context, top *topology, out *row, wait time.Duration) {
	top.hc.CloseIdleConnections()
	for _, b := range top.batons {
		b.mu.Lock()
		running := b.cmd != nil
		b.mu.Unlock()
		if !running {
			continue
		}
		var links *linkTally
		if top.cluster != nil {
			links = &linkTally{}
		}
		left, err := b.leftGoroutines(ctx, wait, func(now []goroutine) map[int]bool {
			if links == nil {
				return nil
			}
			return b.clusterLinks(ctx, top.cluster, now, links)
		})
		if err != nil {
			out.violations++
			out.details = append(out.details, fmt.Sprintf("baton %s: goroutines unreadable: %v", b.name, err))
			continue
		}
		if links != nil {
			out.details = append(out.details, fmt.Sprintf("baton %s: %s", b.name, links))
		}
		if len(left) == 0 {
			continue
		}
		out.violations += len(left)
		out.summary += fmt.Sprintf("; baton %s leaked %d goroutines", b.name, len(left))
		var stacks []string
		for i, g := range left {
			if i == maxStacks {
				stacks = append(stacks, fmt.Sprintf("(and %d more)", len(left)-maxStacks))
				break
			}
			stacks = append(stacks, g.stack)
		}
		out.details = append(out.details, fmt.Sprintf("baton %s: %d goroutines still running %v after the workload ended that were not there "+
			"when it started:\n%s", b.name, len(left), wait, strings.Join(stacks, "\n\n")))
	}
}

// The goroutines of a Baton's pub/sub link, its reader and its writer, are
// known by their profiler labels (store/labels.go), which a goroutine dump
// (debug=2) shows in each goroutine's header line when the process runs with
// GODEBUG=tracebacklabels=1 (batonGODEBUG).
const (
	linkReader = `labels:{"baton": "pubsub-reader"}`
	linkWriter = `labels:{"baton": "pubsub-writer"}`
)

// batonGODEBUG is the GODEBUG a Baton runs with: the one given to the runner,
// with goroutine labels shown in goroutine dumps.
func batonGODEBUG() string {
	if d := os.Getenv("GODEBUG"); d != "" {
		return "GODEBUG=" + d + ",tracebacklabels=1"
	}
	return "GODEBUG=tracebacklabels=1"
}

// linkTally is what clusterLinks last found.
type linkTally struct {
	readers, writers, masters int
	gauge                     float64 // baton_pubsub_connections
	ok                        bool
}

func (l *linkTally) String() string {
	if l.ok {
		return fmt.Sprintf("%d pub/sub links kept (baton_pubsub_connections %v; %d masters): their %d goroutines not counted",
			l.readers, l.gauge, l.masters, l.readers+l.writers)
	}
	return fmt.Sprintf("pub/sub links not as a sound store keeps them, their goroutines counted: %d readers, %d writers, "+
		"baton_pubsub_connections %v, %d masters", l.readers, l.writers, l.gauge, l.masters)
}

// clusterLinks are the ids of the goroutines of the process's pub/sub links
// among now, when they are those of a store on cluster c that keeps at most a
// link per master: as many readers as writers, as many links as its
// baton_pubsub_connections says, and no more than c has masters now. Else
// none: every one of them not in the baseline is a leak. A Baton makes a link
// to a master the first time a channel of its needs one there (after the
// baseline, taken once ready, before any waiter), keeps it while the node is
// a master, and drops it once the node is not (a failover, its slots moved
// away): store.TestClusterLinksSettleOnePerMaster.
func (b *baton) clusterLinks(ctx context.Context, c *redistest.Cluster, now []goroutine, t *linkTally) map[int]bool {
	var ids map[int]bool
	ids, t.readers, t.writers = linkGoroutines(now)
	t.gauge = b.gauge(ctx, "baton_pubsub_connections")
	t.masters = len(masters(ctx, c))
	t.ok = t.readers == t.writers && float64(t.readers) == t.gauge && t.readers <= t.masters
	if !t.ok {
		return nil
	}
	return ids
}

// linkGoroutines are the ids of the links' readers and writers among gs, and
// how many of each.
func linkGoroutines(gs []goroutine) (ids map[int]bool, readers, writers int) {
	ids = map[int]bool{}
	for _, g := range gs {
		header, _, _ := strings.Cut(g.stack, "\n")
		switch {
		case strings.Contains(header, linkReader):
			readers++
		case strings.Contains(header, linkWriter):
			writers++
		default:
			continue
		}
		ids[g.id] = true
	}
	return ids, readers, writers
}

// maxStacks is how many leaked goroutines' stacks a detail shows.
const maxStacks = 10

// leftGoroutines waits up to wait for the process to have no goroutine but those
// of its baseline and those extra says it may have now, and returns the others
// it still has then.
func (b *baton) leftGoroutines(ctx context.Context, wait time.Duration, extra func(now []goroutine) map[int]bool) ([]goroutine, error) {
	b.mu.Lock()
	idle := b.idle
	b.mu.Unlock()
	for deadline := time.Now().Add(wait); ; {
		now, err := b.goroutines(ctx)
		if err != nil {
			return nil, err
		}
		ok := extra(now)
		var left []goroutine
		for _, g := range now {
			if !idle[g.id] && !ok[g.id] {
				left = append(left, g)
			}
		}
		if len(left) == 0 || !time.Now().Before(deadline) {
			return left, nil
		}
		time.Sleep(100 * time.Millisecond) // a profile: only visible by asking
	}
}

// goroutine is one entry of a goroutine profile: its id and its stack as Go
// prints it (the header line, the frames, and who created it).
type goroutine struct {
	id    int
	stack string
}

// goroutines reads the process's goroutines from its runtime profiles, leaving
// out the one that serves this request and those it started.
func (b *baton) goroutines(ctx context.Context) ([]goroutine, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.debug+"/debug/pprof/goroutine?debug=2", nil)
	res, err := probeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("goroutine profile: %s", res.Status)
	}
	return othersThanProfiler(parseGoroutines(string(body))), nil
}

// parseGoroutines splits a dump in Go's traceback format (debug=2; a panic's)
// into its goroutines. Blocks that do not start with a goroutine header are
// skipped.
func parseGoroutines(dump string) []goroutine {
	var gs []goroutine
	for _, block := range strings.Split(strings.TrimSpace(dump), "\n\n") {
		var id int
		if _, err := fmt.Sscanf(block, "goroutine %d ", &id); err == nil {
			gs = append(gs, goroutine{id: id, stack: strings.TrimSpace(block)})
		}
	}
	return gs
}

// othersThanProfiler drops the goroutine serving the profile (net/http/pprof in
// its stack) and the goroutines it started (its connection's background read).
func othersThanProfiler(gs []goroutine) []goroutine {
	self := -1
	for _, g := range gs {
		if strings.Contains(g.stack, "net/http/pprof.") {
			self = g.id
		}
	}
	var out []goroutine
	for _, g := range gs {
		if self < 0 || (g.id != self && creator(g.stack) != self) {
			out = append(out, g)
		}
	}
	return out
}

// notServingRequests drops the goroutines serving HTTP connections (the API's
// and the profile's own) and those they started.
func notServingRequests(gs []goroutine) []goroutine {
	const serve = "net/http.(*conn).serve("
	serving := map[int]bool{}
	for _, g := range gs {
		if strings.Contains(g.stack, serve) {
			serving[g.id] = true
		}
	}
	var out []goroutine
	for _, g := range gs {
		if !serving[g.id] && !serving[creator(g.stack)] {
			out = append(out, g)
		}
	}
	return out
}

// creator is the id of the goroutine that started this one, from its stack's
// "created by ... in goroutine N" line; -1 when the stack does not say.
func creator(stack string) int {
	for _, line := range strings.Split(stack, "\n") {
		if rest, ok := strings.CutPrefix(line, "created by "); ok {
			if i := strings.LastIndex(rest, " in goroutine "); i >= 0 {
				if id, err := strconv.Atoi(rest[i+len(" in goroutine "):]); err == nil {
					return id
				}
			}
		}
	}
	return -1
}
