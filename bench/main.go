// Command bench runs Baton side by side with etcd's HTTP lock API, bsm/redislock
// and Baton's own Lua scripts called straight from Go (the ceiling Baton's HTTP
// layer can approach), and beside two floors: hello, two requests to a minimal
// net/http server (what HTTP costs), and floor, SET NX PX and a compare-and-delete
// script (what a Redis lock costs Redis), on one machine in one run, and writes
// bench/results.json (and, with -full, bench/RESULTS.md and bench/results.svg).
// Its commands scenario counts the Redis commands of a pair (MONITOR) and the
// keys a released name leaves; its budgets table sets Baton's figures against
// the floors, and against a reference commit's Baton run beside it (-ref,
// b42c606 by default with -full). Its names scenario measures what a lock name
// costs Redis after its last release, and makes the run exit 1 when keys outlive
// the fence guard; its shared scenario, shared holds on one lock.
//
// It starts everything it measures itself, on free loopback ports: a redis-server,
// an etcd and a Baton built from this tree, and stops them again at the end, also
// on error and Ctrl-C. On a machine with two or more CPUs the serving side runs on
// CPU 1 and this process (the load generator) on CPU 0. With -baton-bin it runs
// a prebuilt Baton instead, to compare two commits (see the README).
//
//	go run ./bench          # quick: a few minutes
//	go run ./bench -full    # full: about a quarter of an hour, also writes RESULTS.md and the chart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == helloFlag {
		if err := helloServer(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench hello server:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == helperFlag {
		if err := waiterHelper(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench waiter helper:", err)
			os.Exit(1)
		}
		return
	}
	if err := pinGenerator(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	full := fs.Bool("full", false, "the full comparison (<= 10 min); also writes RESULTS.md and results.svg")
	only := fs.String("only", "", "comma-separated scenarios to run (commands,uncontended,handoff,shared,waiters,expiry_handoff,names,cluster); default all")
	systems := fs.String("systems", "", "comma-separated systems to run ("+strings.Join(allSystems, ",")+"); default all")
	rate := fs.Float64("rate", 0, "uncontended: open-loop at this many pairs/s per run instead of closed-loop max throughput")
	durability := fs.String("durability", "both", "uncontended: the durability cells to run: memory (Redis without persistence, etcd's data on tmpfs), durable (Redis appendfsync always, etcd on disk), or both; the other scenarios always run on the memory cell")
	duration := fs.Duration("duration", 0, "uncontended: measured time of one run (default: the mode's)")
	concurrency := fs.Int("concurrency", 0, "uncontended: only this concurrency (default: 1, 16 and 64)")
	outDir := fs.String("out", "", "directory for results.json etc., made if missing (default: bench/ of the module)")
	names := fs.String("names", "", "names: comma-separated counts of distinct names (default: the mode's)")
	namesGuard := fs.Duration("names-guard", 0, "names: the fence guard, and the leases' ttl (default: the mode's)")
	authCompare := fs.Bool("auth-compare", false, "uncontended: also run Baton with BATON_AUTH=off (baton-off) and in keys mode with a Bearer key (baton-keys)")
	batonBin := fs.String("baton-bin", "", "run this prebuilt Baton server binary instead of building ./cmd/server (to compare commits: see the README)")
	ref := fs.String("ref", "", "build this commit's server and run it beside Baton as baton-ref, in the commands, uncontended and handoff scenarios; 'none' for none (default: "+defaultRef+" with -full, none without)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	cfg := quickConfig()
	if *full {
		cfg = fullConfig()
	}
	cfg.rate = *rate
	switch *durability {
	case "both":
		cfg.durabilities = []string{durMemory, durDurable}
	case durMemory, durDurable:
		cfg.durabilities = []string{*durability}
	default:
		return fmt.Errorf("-durability %q: want memory, durable or both", *durability)
	}
	cfg.authCompare = *authCompare
	switch *ref {
	case "":
	case "none":
		cfg.ref = ""
	default:
		cfg.ref = *ref
	}
	if *batonBin != "" {
		if cfg.batonBin, err = prebuilt(*batonBin); err != nil {
			return err
		}
	}
	if *duration > 0 {
		cfg.duration = *duration
	}
	if *concurrency > 0 {
		cfg.concurrency = []int{*concurrency}
	}
	if *names != "" {
		if cfg.namesCounts, err = splitCounts(*names); err != nil {
			return err
		}
	}
	if *namesGuard > 0 {
		if *namesGuard < time.Second {
			return fmt.Errorf("-names-guard %v: Baton takes at least 1s", *namesGuard)
		}
		cfg.namesGuard = *namesGuard
	}
	cfg.scenarios = splitSet(*only)
	cfg.systems = splitSet(*systems)

	root, err := moduleRoot()
	if err != nil {
		return err
	}
	dir := *outDir
	if dir == "" {
		dir = filepath.Join(root, "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-out: %w", err)
	}

	started := time.Now()
	e, err := newEnv(ctx, root, cfg)
	if err != nil {
		return err
	}
	defer e.close()
	res := &results{Mode: cfg.mode, When: started.UTC().Format(time.RFC3339), Pinning: e.pin, Setup: e.setup(),
		Load: otherLoad{Scenarios: map[string]float64{}}}
	res.info = machineInfo(ctx, e)
	res.Machine = res.info.summary()
	fmt.Printf("bench %s: %s\n", cfg.mode, res.Machine)
	fmt.Printf("pinning: %s\n", e.pin.Note)
	fmt.Printf("etcd data directory: %s\n", res.Setup.EtcdData)
	res.Load.Start = loadAverage()
	if la, _, _ := strings.Cut(res.Load.Start, " "); parseFloat(la) > 0.7 {
		fmt.Printf("warning: the machine is busy (load average %s): other processes will perturb the figures\n", res.Load.Start)
	}
	runStart := e.mark()

	// A scenario that fails ends the run, but the tables of those before it are
	// still printed (not written: the files keep the last whole run).
	var failed error
	for _, sc := range []struct {
		name string
		fn   func(context.Context, *env, config, *results) error
	}{
		{"commands", runCommandsAll},
		{"uncontended", runUncontendedAll},
		{"handoff", runHandoffAll},
		{"shared", runSharedAll},
		{"waiters", runWaitersAll},
		{"expiry_handoff", runExpiryAll},
		{"names", runNamesAll},
		{"cluster", runClusterAll},
	} {
		if !cfg.wantScenario(sc.name) {
			continue
		}
		m := e.mark()
		if err := sc.fn(ctx, e, cfg, res); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", ctx.Err())
			}
			failed = fmt.Errorf("%s: %w", sc.name, err)
			break
		}
		other := round(e.otherLoad(m, e.mark()), 1)
		res.Load.Scenarios[sc.name] = other
		fmt.Printf("%s: other processes used %.1f%% of the machine's CPU meanwhile\n", sc.name, other)
	}
	res.Load.Run = round(e.otherLoad(runStart, e.mark()), 1)
	res.Load.End = loadAverage()
	res.Goals = evaluateGoals(res)
	res.Budgets = evaluateBudgets(res)
	res.elapsed = time.Since(started)
	table := res.table()
	fmt.Println()
	fmt.Print(table)
	if failed != nil {
		return fmt.Errorf("%w (the tables above are of the scenarios before it; no file written)", failed)
	}

	if err := res.writeJSON(filepath.Join(dir, "results.json")); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", filepath.Join(dir, "results.json"))
	if cfg.full {
		if err := res.writeMarkdown(filepath.Join(dir, "RESULTS.md"), table); err != nil {
			return err
		}
		if err := writeChart(filepath.Join(dir, "results.svg"), res); err != nil {
			return err
		}
		fmt.Printf("wrote %s and %s\n", filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "results.svg"))
	}
	fmt.Printf("done in %s\n", res.elapsed.Round(time.Second))
	if len(res.failures) > 0 {
		return fmt.Errorf("%d check(s) failed:\n  %s", len(res.failures), strings.Join(res.failures, "\n  "))
	}
	return nil
}

// moduleRoot is the nearest directory upwards holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from inside the module")
		}
		dir = parent
	}
}

// prebuilt is the absolute path of an executable regular file, or an error
// saying why path is not one.
func prebuilt(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("-baton-bin %s: %w", path, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("-baton-bin: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("-baton-bin %s: not an executable file", path)
	}
	return abs, nil
}

func splitSet(s string) map[string]bool {
	if s == "" {
		return nil
	}
	m := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			m[f] = true
		}
	}
	return m
}

// splitCounts parses "10000,100000" into ascending counts.
func splitCounts(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-names %q: want positive counts separated by commas", s)
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns, nil
}

func parseFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}
