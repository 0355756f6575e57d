package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/redistest"
)

const (
	waiterLocks     = 100 // held locks the waiters queue behind
	batonMaxWaiters = 100000
)

// runWaitersAll measures Baton holding n long-polls at each level, each level on
// a fresh Baton process so that one level's heap does not inflate the next one's
// baseline. The shared Baton is stopped meanwhile, so that every Redis connection
// not made by this program is the measured Baton's.
func runWaitersAll(ctx context.Context, e *env, cfg config, res *results) (err error) {
	if !cfg.wantSystem(sysBaton) {
		return nil
	}
	levels, why := waiterLevels(cfg, e.noFile)
	fmt.Printf("waiters: levels %v (%s)\n", levels, why)
	e.baton.stop(10 * time.Second)
	e.baton = nil
	defer func() {
		if ctx.Err() != nil {
			return
		}
		var serr error
		if e.baton, e.batonURL, serr = e.startBaton(ctx); serr != nil && err == nil {
			err = serr
		}
	}()
	for _, n := range levels {
		row, err := waitersLevel(ctx, e, cfg, n, nil, []string{e.redis.Addr()})
		if err != nil {
			return fmt.Errorf("%d waiters: %w", n, err)
		}
		res.Waiters = append(res.Waiters, row)
		res.waitersBound = why
		fmt.Printf("waiters %-12s %6d long-polls: %6.0f B RSS each (%6.0f B after a GC, %5.0f B live heap)  %d redis connections (%d pub/sub)  idle CPU %.2f%%, Redis %.1f commands/s\n",
			sysBaton, row.Waiters, row.RSSPerWaiter, row.RSSPerWaiterAfterGC, row.HeapPerWaiter, row.RedisConns, row.PubSubConns, row.IdleCPU, row.RedisIdleCmds)
	}
	return nil
}

// waiterLevels are the configured levels below what the machine allows, then
// the most it allows within the mode's cap. It says what bounded the last one.
// Baton inherits this process's open-file limit; waitersLevel trims the last
// level again to the exact room the Baton process has.
func waiterLevels(cfg config, noFile uint64) ([]int, string) {
	allowed, why := batonMaxWaiters-2*waiterLocks, "BATON_MAX_WAITERS"
	if f := int(noFile) - 64; f < allowed {
		allowed, why = f, fmt.Sprintf("the open-file limit of %d (one connection per long-poll; "+
			"the hard limit cannot be raised without CAP_SYS_RESOURCE)", noFile)
	}
	if m := memAvailable() / (96 << 10); m > 0 && int(m) < allowed {
		allowed, why = int(m), "available memory at 96 KiB per waiter (both sides)"
	}
	if cfg.waiterCap < allowed {
		allowed, why = cfg.waiterCap, fmt.Sprintf("this mode's time budget (the machine allows more: %s)", why)
	}
	var levels []int
	for _, l := range cfg.waiterLevels {
		if l < allowed {
			levels = append(levels, l)
		}
	}
	return append(levels, allowed), "last level bounded by " + why
}

func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// waitersLevel starts a Baton, holds waiterLocks locks, opens n non-fair acquires
// waiting up to 10 minutes behind them (each on its own connection, held by
// helper processes), and measures Baton while they all wait. n is lowered to what
// the Baton process's open-file limit leaves room for; the row says what ran.
// batonEnv is more environment for that Baton (the cluster scenario points it at
// a cluster), and redisAddrs the Redis servers whose connections are counted
// (every master of a cluster).
func waitersLevel(ctx context.Context, e *env, cfg config, n int, batonEnv, redisAddrs []string) (waitersRow, error) {
	row := waitersRow{Scenario: "waiters", System: sysBaton}
	dport, err := redistest.FreePort()
	if err != nil {
		return row, err
	}
	debugURL := "http://127.0.0.1:" + strconv.Itoa(dport)
	p, base, err := e.startBaton(ctx, append(slices.Clone(batonEnv), "BATON_DEBUG_ADDR=127.0.0.1:"+strconv.Itoa(dport))...)
	if err != nil {
		return row, err
	}
	defer p.stop(15 * time.Second)

	hc := client.New(base)
	prefix := fmt.Sprintf("w%d", n)
	for k := range waiterLocks {
		if _, err := hc.Acquire(ctx, waiterName(prefix, k), client.AcquireOptions{TTL: time.Hour}); err != nil {
			return row, err
		}
	}
	if room := fdRoom(p.pid()); room < n {
		fmt.Printf("waiters %-12s %6d long-polls do not fit in Baton's open-file limit (%d): %d instead\n",
			sysBaton, n, openFileLimit(p.pid()), room)
		n = room
	}
	row.Waiters = n
	time.Sleep(500 * time.Millisecond) // let the first requests' garbage settle into the baseline
	rss0, err := rssBytes(p.pid())
	if err != nil {
		return row, err
	}
	heap0, err := liveHeap(ctx, debugURL) // after a GC, as the figure it is subtracted from
	if err != nil {
		return row, err
	}

	opened := time.Now()
	hs, err := startHelpers(base, prefix, n)
	defer stopHelpers(hs)
	if err != nil {
		return row, err
	}
	waiting, err := awaitOpen(ctx, base, hs, n, 60*time.Second+time.Duration(n)*time.Millisecond)
	if err != nil {
		return row, fmt.Errorf("%w (helpers: %v)", err, helpersFailed(hs))
	}
	row.OpenSeconds = round(time.Since(opened).Seconds(), 1)
	row.Refused = helpersRefused(hs)
	fmt.Printf("waiters %-12s %6d long-polls open in %.1f s: %d waiting, refused %v\n", sysBaton, n, row.OpenSeconds, waiting, row.Refused)
	if k := row.Refused["store-unavailable"]; k > 0 {
		// Redis is up (a local server nobody stops): the store must not say otherwise.
		up := pingAll(ctx, redisAddrs)
		return row, fmt.Errorf("%d of %d opens answered 503 store-unavailable while Redis was up (ping: %v); refused: %v",
			k, n, up, row.Refused)
	}
	if waiting == 0 {
		return row, fmt.Errorf("no long-poll of %d waits; refused: %v", n, row.Refused)
	}
	row.Waiters = waiting
	time.Sleep(time.Second)

	cpu0, err := cpuTime(p.pid())
	if err != nil {
		return row, err
	}
	cmds0, err := redisCommands(ctx, redisAddrs)
	if err != nil {
		return row, err
	}
	idle0 := time.Now()
	time.Sleep(cfg.idleWindow)
	cpu1, err := cpuTime(p.pid())
	if err != nil {
		return row, err
	}
	cmds1, err := redisCommands(ctx, redisAddrs)
	if err != nil {
		return row, err
	}
	// Less this program's INFO on each server (the first one's is counted).
	row.RedisIdleCmds = round(float64(cmds1-cmds0-int64(len(redisAddrs)))/time.Since(idle0).Seconds(), 1)
	rss1, err := rssBytes(p.pid())
	if err != nil {
		return row, err
	}
	if err := helpersFailed(hs); err != nil {
		return row, err
	}
	var all, pubsub int
	for _, addr := range redisAddrs {
		a, ps, err := foreignRedisClients(ctx, addr)
		if err != nil {
			return row, err
		}
		all, pubsub = all+a, pubsub+ps
	}
	// What the waiters themselves cost, without the garbage their arrival left
	// (each request's net/http buffers until it parked): Go collects it at its
	// next GC, at the latest the runtime's forced one two minutes on, and
	// returns the pages over the following seconds. The bench asks for that GC
	// now (pprof's heap profile with gc=1) and reads RSS once it stops falling.
	n = row.Waiters
	if rss2, err := settledRSS(ctx, debugURL, p.pid()); err == nil {
		row.RSSPerWaiterAfterGC = round(float64(rss2-rss0)/float64(n), 0)
		if heap, err := liveHeap(ctx, debugURL); err == nil {
			row.HeapPerWaiter = round(float64(heap-heap0)/float64(n), 0)
		}
	} else {
		fmt.Printf("waiters %-12s %6d: no figure after a GC: %v\n", sysBaton, n, err)
	}
	row.RSSPerWaiter = round(float64(rss1-rss0)/float64(n), 0)
	row.RedisConns, row.PubSubConns = all, pubsub
	row.IdleCPU = round(100*(cpu1-cpu0).Seconds()/cfg.idleWindow.Seconds(), 2)
	row.rssBefore, row.rssWith = rss0, rss1
	return row, nil
}

func waiterName(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i%waiterLocks) }

// fdRoom is how many more connections a process can take: its open-file limit
// less what it has open, and a margin for its Redis pool to grow and for the
// metrics requests.
func fdRoom(pid int) int {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int(openFileLimit(pid)) - len(fds) - 32
}

// openFileLimit is a process's soft RLIMIT_NOFILE, from /proc/<pid>/limits.
func openFileLimit(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Max open files"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// foreignRedisClients counts the connections to Redis not made by this program
// (every one of which is named benchClientName), and those among them in pub/sub
// mode.
func foreignRedisClients(ctx context.Context, addr string) (all, pubsub int, err error) {
	rdb := newRedisClient(addr)
	defer rdb.Close()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if f["name"] == benchClientName {
			continue
		}
		all++
		if strings.Contains(f["flags"], "P") || f["sub"] != "0" || f["psub"] != "0" || (f["ssub"] != "" && f["ssub"] != "0") {
			pubsub++
		}
	}
	return all, pubsub, nil
}

// awaitOpen waits until each of the n long-polls the helpers opened waits in
// Baton or was refused, and returns how many wait. It polls Baton's gauge
// every 50 ms (each look costs Baton a metrics scrape, which the burst
// competes with), and tolerates a look that fails while Baton is busy.
func awaitOpen(ctx context.Context, base string, hs []*helper, n int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	var lastErr error
	got := 0
	for {
		refused := 0
		for _, k := range helpersRefused(hs) {
			refused += k
		}
		w, err := batonWaiters(ctx, base)
		if err == nil {
			got, lastErr = w, nil
		} else {
			lastErr = err
		}
		if err == nil && got+refused >= n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("baton holds %d long-polls and refused %d after %v, want %d in all (last look: %v)",
				got, refused, timeout, n, lastErr)
		}
		if ctx.Err() != nil {
			return got, ctx.Err()
		}
		time.Sleep(50 * time.Millisecond) // the gauge is the only signal there is
	}
}

// redisCommands is the commands the Redis servers at addrs processed so far
// (INFO stats), summed.
func redisCommands(ctx context.Context, addrs []string) (int64, error) {
	var all int64
	for _, addr := range addrs {
		rdb := newRedisClient(addr)
		info, err := rdb.Info(ctx, "stats").Result()
		rdb.Close()
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				all += n
			}
		}
	}
	return all, nil
}

// pingAll says whether each Redis at addrs answers PING.
func pingAll(ctx context.Context, addrs []string) map[string]bool {
	up := map[string]bool{}
	for _, addr := range addrs {
		rdb := newRedisClient(addr)
		up[addr] = rdb.Ping(ctx).Err() == nil
		rdb.Close()
	}
	return up
}

// liveHeap is the Baton at debugURL's heap in use right after a GC (the heap
// profile's HeapAlloc, taken with gc=1).
func liveHeap(ctx context.Context, debugURL string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, debugURL+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapAlloc in the heap profile")
}

// settledRSS has the Baton at debugURL collect its garbage, then reads its RSS
// each second while the runtime's background scavenger returns the freed pages
// (at its own pace: seconds to tens of seconds for hundreds of MB), until it
// has not fallen for 5 s, at most 60 s; it returns the lowest reading.
func settledRSS(ctx context.Context, debugURL string, pid int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, debugURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile: %s", resp.Status)
	}
	low, err := rssBytes(pid)
	if err != nil {
		return 0, err
	}
	still := 0
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && still < 5; {
		time.Sleep(time.Second) // the runtime returns pages over time; nothing to wait on
		now, err := rssBytes(pid)
		if err != nil {
			return 0, err
		}
		if now < low {
			low, still = now, 0
		} else {
			still++
		}
	}
	return low, nil
}
