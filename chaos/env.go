package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/chaos/callproxy"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/redistest"
)

// keyPrefix is the BATON_KEY_PREFIX of every Baton this program starts.
const keyPrefix = "chaos"

// topology is what a scenario runs on: today one redis-server and two Baton
// processes that talk to it directly. Faults between Baton and Redis (a proxy) or a
// Sentinel setup are other topologies behind the same fields.
type topology struct {
	redis *redistest.Server
	proxy *netProxy // between Baton and Redis, for net-* scenarios; else nil
	// calls are the script-call fault proxies, one between each Baton process
	// (in the order of batons) and Redis, for the call-faults scenario; else nil.
	calls []*callproxy.Proxy
	// cluster is the Redis Cluster the Batons moved onto (cluster.go); else nil.
	cluster *redistest.Cluster
	rdb     redis.UniversalClient // for injecting faults and inspecting keys (a Cluster scenario's: a cluster client)
	batons  []*baton
	// keys are the principals' keys (auth.go); fleet their clients, one per
	// Baton process in the order of batons.
	keys  map[string]string
	fleet map[string][]*client.Client
	cls   []*client.Client // the runner's own (fleet[runnerPrincipal])
	bases []string         // the Baton processes' base URLs, same order
	hc    *http.Client     // the clients' transport, closed at the end
}

// topoOptions shape a topology.
type topoOptions struct {
	batons    int      // Baton processes
	redisArgs []string // extra redis-server arguments
	env       []string // extra BATON_* settings
	proxied   bool     // Baton reaches Redis through an in-process toxiproxy
	calls     bool     // each Baton reaches Redis through a script-call fault proxy of its own
	// scope is the workload's lock names' prefix, for the workers' grants
	// (auth.go); empty: "chaos".
	scope string
}

// clientsOf are principal p's clients, one per Baton process.
func (t *topology) clientsOf(p string) []*client.Client { return t.fleet[p] }

// baton is one Baton server process on a fixed port, so that it can be killed and
// started again where its clients expect it.
type baton struct {
	name string
	bin  string
	dir  string
	env  []string
	base string
	// debug is the base URL of its BATON_DEBUG_ADDR (runtime profiles).
	debug string
	// addr0 and debug0 are the host:port of base and debug: where the process
	// was first started, and where this program's dialers still ask for it
	// (dialBaton) should it have moved (ports.go).
	addr0, debug0 string
	// opsKey is the runner's key, for /metrics.
	opsKey string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
	starts int
	// addr and debugAddr are where it listens now: addr0 and debug0 unless
	// a start found those taken for longer than bindWait, and moved it; moves
	// says where to, each time.
	addr, debugAddr string
	moves           []string
	// idle holds the ids of the process's goroutines once ready after its latest
	// start, but for those serving requests: what it must come back to
	// (goroutines.go).
	idle map[int]bool
}

// probeClient is the runner's own client for /readyz, /metrics and the runtime
// profiles. It opens a connection per request, so that it leaves no idle
// connection, and no goroutine serving one, in the process it asks.
var probeClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialBaton}}

// startTopology starts a redis-server (with extra arguments) whose files go to
// dir, and o.batons Baton processes on it, in keys mode. stop undoes it all.
func startTopology(dir, bin string, o topoOptions) (*topology, error) {
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	rs, err := redistest.StartServer(rdir, o.redisArgs...)
	if err != nil {
		return nil, err
	}
	t := &topology{redis: rs, rdb: redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1}),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second,
			DialContext: dialBaton}}}
	redisURL := func(int) string { return rs.URL() }
	switch {
	case o.proxied:
		if t.proxy, err = startNetProxy(rs.Addr()); err != nil {
			t.stop()
			return nil, err
		}
		redisURL = func(int) string { return t.proxy.url() }
	case o.calls:
		for range o.batons {
			p, err := callproxy.Start(rs.Addr())
			if err != nil {
				t.stop()
				return nil, fmt.Errorf("start the call proxy: %w", err)
			}
			t.calls = append(t.calls, p)
		}
		redisURL = func(i int) string { return "redis://" + t.calls[i].Addr() }
	}
	if err := t.startBatons(dir, bin, redisURL, o); err != nil {
		t.stop()
		return nil, err
	}
	return t, nil
}

// startBatons writes the keys file and starts o.batons Baton processes, the
// i-th on redisURL(i), with a client per principal for each.
func (t *topology) startBatons(dir, bin string, redisURL func(int) string, o topoOptions) error {
	authFile, keys, err := writeKeys(dir, o.scope)
	if err != nil {
		return err
	}
	t.keys, t.fleet = keys, map[string][]*client.Client{}
	for i := range o.batons {
		// Ports outside the ephemeral range: the process is started again on
		// them after a kill (ports.go).
		addr, debug, err := batonPorts()
		if err != nil {
			return err
		}
		batonAddrs.Delete(addr) // an earlier scenario's process may have moved from there
		batonAddrs.Delete(debug)
		b := &baton{
			name: string(rune('A' + i)), bin: bin, dir: dir, base: "http://" + addr, debug: "http://" + debug,
			addr0: addr, debug0: debug, addr: addr, debugAddr: debug, opsKey: keys[runnerPrincipal],
			env: append([]string{
				"BATON_ADDR=" + addr, "BATON_REDIS_URL=" + redisURL(i),
				"BATON_DEBUG_ADDR=" + debug, "BATON_AUTH_FILE=" + authFile,
				"BATON_KEY_PREFIX=" + keyPrefix, "BATON_LOG_LEVEL=warn", "BATON_LOG_FORMAT=json",
				"BATON_SHUTDOWN_DELAY=0s", // BATON_SHUTDOWN_TIMEOUT: the default (stopGrace)
			}, o.env...),
		}
		if err := b.start(); err != nil {
			b.kill() // it may be up, just not ready: it is not in t.batons yet
			return err
		}
		t.batons = append(t.batons, b)
		t.bases = append(t.bases, b.base)
		for _, p := range principals {
			// No retries of the client's own: the runner retries, and records each try.
			t.fleet[p] = append(t.fleet[p], client.New(b.base, client.WithHTTPClient(t.hc),
				client.WithAPIKey(keys[p]), client.WithRetryMaxTime(0)))
		}
	}
	t.cls = t.fleet[runnerPrincipal]
	return nil
}

func (t *topology) stop() {
	for _, b := range t.batons {
		b.stop()
	}
	t.hc.CloseIdleConnections()
	if t.proxy != nil {
		t.proxy.stop()
	}
	for _, p := range t.calls {
		_ = p.Close()
	}
	_ = t.rdb.Close()
	t.redis.Stop()
}

// start runs the process and waits until /readyz answers 200. Should its
// ports be taken (another listener; see ports.go), it waits up to bindWait for
// them, then moves the process to other ports, up to maxMoves times.
func (b *baton) start() error {
	for moves := 0; ; moves++ {
		var err error
		for deadline := time.Now().Add(bindWait); ; {
			if err = b.startOnce(); !errors.Is(err, errPortTaken) {
				return err
			}
			if !time.Now().Before(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // nothing to wait on but the ports
		}
		if moves == maxMoves {
			return err
		}
		if err := b.move(); err != nil {
			return err
		}
	}
}

// startOnce is one try of start; errPortTaken when a port was taken.
func (b *baton) startOnce() error {
	b.mu.Lock()
	// Another process on a port would answer /readyz, or this one exit.
	for _, a := range []string{b.addr, b.debugAddr} {
		if !free(a) {
			b.mu.Unlock()
			return fmt.Errorf("baton %s: %s: %w", b.name, a, errPortTaken)
		}
	}
	b.starts++
	logPath := filepath.Join(b.dir, "baton-"+b.name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	var logged int64 // where this start's output begins
	if fi, err := logf.Stat(); err == nil {
		logged = fi.Size()
	}
	cmd := exec.Command(b.bin)
	cmd.Env = append(append(os.Environ(), b.env...), batonGODEBUG())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.mu.Unlock()
		logf.Close()
		return fmt.Errorf("start baton %s: %w", b.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.cmd, b.exited, b.logf = cmd, exited, logf
	b.mu.Unlock()

	var last error
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			if bindFailed(logPath, logged) {
				return fmt.Errorf("baton %s exited while starting: %w (see %s)", b.name, errPortTaken, logPath)
			}
			return fmt.Errorf("baton %s exited while starting; see %s", b.name, logPath)
		default:
		}
		if last = b.ready(); last == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond) // nothing to wait on but the port
	}
	return fmt.Errorf("baton %s not ready within 15s (%v); see %s", b.name, last, logf.Name())
}

// bindFailed reports whether the log at path, from offset on, says a listener
// could not be opened because its address was in use.
func bindFailed(path string, offset int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	return err == nil && strings.Contains(string(b), "address already in use")
}

// ready reports whether /readyz answers 200 and, once it does, records the
// process's baseline goroutines (idle). A process started again while the
// workload runs may already be serving requests: the goroutines serving
// connections, and those they started, are left out of the baseline, so that
// one of them still there at the end is reported.
func (b *baton) ready() error {
	res, err := probeClient.Get(b.base + "/readyz")
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz %s", res.Status)
	}
	gs, err := b.goroutines(context.Background())
	if err != nil {
		return err
	}
	idle := map[int]bool{}
	for _, g := range notServingRequests(gs) {
		idle[g.id] = true
	}
	b.mu.Lock()
	b.idle = idle
	b.mu.Unlock()
	return nil
}

// kill stops the process with SIGKILL, as a crash would, and waits for it to go.
func (b *baton) kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
	b.logf.Close()
	b.cmd = nil
}

// stopGrace is how long a Baton process gets to exit after SIGTERM: its
// default BATON_SHUTDOWN_TIMEOUT (10s) for the requests in flight, then
// store.Close's wait for the Redis calls in flight (store.WorstCall, 8s) and for
// the abandoned requests to be undone (5s).
const stopGrace = 30 * time.Second

// stop sends SIGTERM, then SIGKILL if the process has not exited within
// stopGrace; it reports whether the process exited by itself.
func (b *baton) stop() bool {
	b.terminate()
	return b.awaitExit(stopGrace)
}

// terminate sends SIGTERM, as a deploy or an operator would, and returns at once.
func (b *baton) terminate() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// awaitExit waits up to d for the process to exit, then kills it (SIGKILL); it
// reports whether the process exited by itself.
func (b *baton) awaitExit(d time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return true
	}
	clean := true
	select {
	case <-b.exited:
	case <-time.After(d):
		clean = false
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.logf.Close()
	b.cmd = nil
	return clean
}

// gauge reads one metric without labels from /metrics; -1 when unreadable.
func (b *baton) gauge(ctx context.Context, name string) float64 {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+b.opsKey)
	res, err := probeClient.Do(req)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// buildBaton builds the server from this tree into dir.
func buildBaton(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "baton")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/server")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build baton: %w\n%s", err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the baton module: run from the repository")
	}
	return filepath.Dir(gomod), nil
}
