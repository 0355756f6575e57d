// Command chaos runs Baton under faults and checks what its clients saw (issues
// 5, 16 and 17).
//
// Each scenario starts a fresh redis-server and two Baton processes built from
// this tree, on free loopback ports, and runs a workload of concurrent clients
// (fair and non-fair acquires, exclusive and shared, re-entries, renewals,
// releases, holders that stop renewing and write on, waiters that stop polling,
// clients that hang up in the middle of a request, locks taken the moment a
// lease runs out) and of watchers
// (long-polls of a lock's state), while it injects its fault again and again.
// Every Baton runs in keys mode, and every request carries the key of one of a
// few principals with different grants (auth.go); a 401 or 403 is a violation.
// Every request is recorded; each lock's history is then checked with porcupine
// against a model of a fenced, reentrant lock with expiring leases and shared
// holds (chaos/check), and every exclusive holder's writes go through a fenced
// resource that counts the stale writes it rejected and any it should not have
// accepted. A sampler reads the locks' holds in Redis every 50 ms (sampler.go),
// so that holds no client was told
// of can be timed: none may outlive the ticket ttl after its client went away
// (check.Orphans), nor live longer than the settle window from its grant
// (-settle-window, 3 s; check.UnknownHolds); and every
// watch must have returned within 50 ms of its lock changing hands
// (check.Watches). After the workload Redis must hold no hold, ticket or queue
// of the finished locks, and BATON_FENCE_GUARD (2s here) later no key at all
// (leaks.go); and neither this program nor the Baton processes may have
// goroutines left over (goroutines.go).
//
//	go run ./chaos         # quick: about six minutes, under eight
//	go run ./chaos -full   # full: about eighteen minutes, under twenty
//
// It prints a table and ends with the line "chaos: N scenarios, V violations, S
// stale writes accepted, O orphan holds", exiting 1 when V, S or O is above
// zero, and 2 when the run itself failed. Columns: the requests the workload
// made; violations (lock histories no legal order explains, answers outside the
// contract, keys left in Redis, leftover goroutines, faults the service did not
// recover from within 30s, watches that returned late); stale writes the fenced
// resources accepted and rejected; the requests answered with a status below
// 500 (requests whose client hung up are not counted); orphan holds: holds no
// client was told of that lasted longer than the ticket ttl (of those seen, and
// the longest any lasted); the watches' lag behind the change they waited for
// (p99, worst, and how many were late, of those judged); the acquires with an
// Idempotency-Key (how many, retried after a lost answer, answered as replays,
// and those that made a second hold, which are violations); and the time from the
// end of each fault (the killed process started again; a killed connection at
// once) until a lock is handed over between the two Baton processes, both ways,
// within a second; and, for Redis kills, the time from the restarted Redis
// answering PING to each Baton process's first 2xx (redisback.go); the holds
// no client was told of: the longest any lived (Redis's outages aside), of
// how many, and how many outlived the settle window (violations); and the
// acquires with an Idempotency-Key whose answer was lost (a transport error,
// a 5xx), by whether Redis was up when the last lost try ended, with how many
// a later try settled (one lost while Redis was up and never settled is a
// violation), and the acquires without a key whose answer was lost. The
// Redis Cluster scenarios are in cluster.go; faults on single script calls
// (late copies, lost replies, stalls) in callfaults.go:
//
//	go run ./chaos -only call-faults -duration 90s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// config is the size and pace of a run.
type config struct {
	clients  int           // concurrent workload clients
	locks    int           // lock names they share
	duration time.Duration // workload time per scenario
	tail     time.Duration // fault-free time at the end of the workload
	maxOps   int           // requests per client, at most

	minTTL, maxTTL time.Duration // lease lengths asked for, mostly
	longTTL        time.Duration // the longest lease, asked for now and then
	maxWait        time.Duration // the longest wait_ms of an acquire
	maxPoll        time.Duration // the longest wait_ms of a ticket poll
	ticketTTL      time.Duration // BATON_TICKET_TTL
	fenceGuard     time.Duration // BATON_FENCE_GUARD
	hangUps        float64       // the share of a worker's cycles in which it hangs up (hangup.go)
	expiryRaces    float64       // the share in which it takes a lock at the moment its lease runs out (expiry.go)
	keyed          float64       // the share of its acquires that carry an Idempotency-Key (workload.go)
	replays        float64       // the share of those it sends again after an answer, and after the hold ended
	idemGrace      time.Duration // BATON_IDEMPOTENCY_GRACE

	watchers   int           // clients that only watch (watcher.go)
	maxWatch   time.Duration // the longest wait_ms of a watch
	watchSlack time.Duration // what a watch's lag may exceed check.WatchBound by: clocks and scheduling

	pubsubEvery, redisEvery, batonEvery time.Duration // how often each fault is injected
	down                                time.Duration // how long a killed process stays down
	freezeMin, freezeMax                time.Duration // how long a frozen Redis stays frozen (slow.go)

	settle       time.Duration // how long leftovers may take to expire after the workload
	settleWindow time.Duration // the longest a hold no client was told of may live (check.UnknownHolds)
	checkTimeout time.Duration // porcupine's time per lock history
	seed         uint64
	keep         bool // keep the working directory, histories included
}

func quickConfig() config {
	return config{
		clients: 32, locks: 6, duration: 20 * time.Second, tail: 2 * time.Second, maxOps: 4000,
		minTTL: 200 * time.Millisecond, maxTTL: 800 * time.Millisecond, longTTL: 4 * time.Second,
		maxWait: 800 * time.Millisecond, maxPoll: 800 * time.Millisecond, ticketTTL: time.Second,
		fenceGuard: 2 * time.Second, hangUps: 0.12, expiryRaces: 0.03,
		keyed: 0.4, replays: 0.3, idemGrace: idemGrace,
		watchers: 6, maxWatch: 1500 * time.Millisecond, watchSlack: 50 * time.Millisecond,
		pubsubEvery: time.Second, redisEvery: 3 * time.Second, batonEvery: 3 * time.Second,
		down: 300 * time.Millisecond, freezeMin: 3 * time.Second, freezeMax: 5 * time.Second,
		checkTimeout: 20 * time.Second, settleWindow: settleWindow,
	}
}

// settleWindow is the default of -settle-window: the longest a hold no client
// was told of may live, Redis's outages aside. Baton decides what a script
// call of unknown outcome did once the call's deadline has passed (under the
// store's 2 s read timeout), then ends what nobody was told of; a ticket's
// grant is kept for its owner's next poll for the ticket ttl (1 s here). 3 s
// covers both, and the sampler's pace.
const settleWindow = 3 * time.Second

// idemGrace is the Batons' BATON_IDEMPOTENCY_GRACE, in both modes: longer
// than the longest fault (Redis frozen up to freezeMax, 5 s; a network black
// hole of 3*maxTTL), so that a key's retry that comes only after a fault is
// within the grace of what the key made, even when that ended unseen during the
// fault (a lease run out while its renewal's outcome was unknown): the retry
// is a 409 idempotency-key-used, never a new hold. With a shorter grace such a
// retry is, by the contract, a fresh acquire (API.md, "Idempotency-Key"),
// which check.Idempotency cannot tell from a second hold, not knowing when the
// first truly ended. The key check lets the records live the grace after the
// locks finished (checkKeys).
const idemGrace = 10 * time.Second

func fullConfig() config {
	c := quickConfig()
	// 18 scenarios of 70s, each with its start, checks and waits for keys to
	// expire (about 12s more): about 25 minutes.
	c.clients, c.locks, c.duration, c.tail, c.maxOps = 48, 8, 70*time.Second, 4*time.Second, 100000
	c.watchers = 8
	c.pubsubEvery, c.redisEvery, c.batonEvery = 1500*time.Millisecond, 7*time.Second, 7*time.Second
	c.checkTimeout = time.Minute
	return c
}

func main() {
	// go-redis prints its clients' failed dials; the runner's clients report
	// their own errors, and the faults it injects make those prints noise.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		code = 2
	}
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	full := fs.Bool("full", false, "the full run (about 25 min) instead of the quick one")
	only := fs.String("only", "", "comma-separated scenarios to run; default all")
	clients := fs.Int("clients", 0, "workload clients (default: the mode's)")
	duration := fs.Duration("duration", 0, "workload time per scenario (default: the mode's)")
	seed := fs.Uint64("seed", 0, "the workload's random seed (default: from the clock)")
	keep := fs.Bool("keep", false, "keep the working directory (logs, histories) even when all is well")
	keyed := fs.Float64("keyed", -1, "the share of acquires that carry an Idempotency-Key, 0 to 1 (default 0.4: the rest exercise the undo of requests without one)")
	window := fs.Duration("settle-window", settleWindow, "the longest a hold no client was told of may live (Redis's outages aside) before it counts as a violation")
	prebuilt := fs.String("bin", "", "run this Baton binary instead of building ./cmd/server (to try the checker on a broken server)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	cfg := quickConfig()
	if *full {
		cfg = fullConfig()
	}
	if *clients > 0 {
		cfg.clients = *clients
	}
	if *duration > 0 {
		cfg.duration = *duration
		cfg.tail = min(cfg.tail, *duration/4)
	}
	if *keyed >= 0 {
		if *keyed > 1 {
			return 2, fmt.Errorf("-keyed %v: a share, 0 to 1", *keyed)
		}
		cfg.keyed = *keyed
	}
	if *window <= 0 {
		return 2, fmt.Errorf("-settle-window %v: a positive duration", *window)
	}
	cfg.seed, cfg.keep, cfg.settleWindow = *seed, *keep, *window
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	// Leftovers expire within the longest lease anyone takes (a workload holder,
	// a recovery probe's holder, a Sentinel canary), a poll, a ticket's life and
	// an unclaimed grant's window; plus slack for Redis's expiry cycle.
	cfg.settle = max(cfg.longTTL, probeTTL, canaryTTL) + cfg.maxPoll + 2*cfg.ticketTTL + 2*time.Second

	var chosen []scenario
	for _, sc := range scenarios() {
		if *only == "" || contains(strings.Split(*only, ","), sc.name) {
			chosen = append(chosen, sc)
		}
	}
	if len(chosen) == 0 {
		return 2, fmt.Errorf("no scenario matches -only %q", *only)
	}

	dir, err := os.MkdirTemp("", "baton-chaos-")
	if err != nil {
		return 2, err
	}
	bin := *prebuilt
	if bin == "" {
		root, err := moduleRoot()
		if err != nil {
			return 2, err
		}
		if bin, err = buildBaton(ctx, root, dir); err != nil {
			return 2, err
		}
	}
	fmt.Fprintf(stdout, "chaos: %d scenarios, %d clients over 2 Baton processes, %v each, seed %d, in %s\n",
		len(chosen), cfg.clients, cfg.duration, cfg.seed, dir)

	var rows []row
	for _, sc := range chosen {
		start := time.Now()
		base := goleak.IgnoreCurrent()
		r, err := runScenario(ctx, &cfg, sc, bin, filepath.Join(dir, sc.name))
		if err != nil {
			return 2, fmt.Errorf("%w (logs in %s)", err, dir)
		}
		checkGoroutines(&r, base, leakWait)
		fmt.Fprintf(stdout, "  %-16s %v: %s\n", sc.name, time.Since(start).Round(100*time.Millisecond), r.summary)
		rows = append(rows, r)
	}

	v, s, o, inconclusive := 0, 0, 0, 0
	for _, r := range rows {
		v += r.violations
		s += r.staleAccepted
		o += r.orphans.Count()
		inconclusive += r.inconclusive
		for _, d := range r.details {
			fmt.Fprintf(stdout, "%s: %s\n", r.name, d)
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, rows)
	if v == 0 && s == 0 && o == 0 && inconclusive == 0 && !cfg.keep {
		_ = os.RemoveAll(dir)
	}
	fmt.Fprintf(stdout, "chaos: %d scenarios, %d violations, %d stale writes accepted, %d orphan holds\n", len(rows), v, s, o)
	switch {
	case v > 0 || s > 0 || o > 0:
		return 1, nil
	case inconclusive > 0:
		return 2, nil
	}
	return 0, nil
}

// quiet is a go-redis logger that prints nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func contains(list []string, s string) bool {
	for _, l := range list {
		if strings.TrimSpace(l) == s {
			return true
		}
	}
	return false
}
