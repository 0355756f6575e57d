package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/internal/redistest"
)

// env is everything the benchmark started: one redis-server without
// persistence shared by Baton, redislock, redis-script and the floor, one etcd
// with its data on tmpfs, and Baton built from the tree (or the prebuilt binary
// of -baton-bin): the memory cell of the durability table, which every scenario
// uses. Beside them, for the uncontended scenario, the hello server, and with
// -ref a Baton built from that commit (baton-ref) on the same redis-server,
// under a key prefix of its own. With the durable cell (-durability), the
// uncontended scenario also gets a durable redis-server (appendonly,
// appendfsync always, on disk) with a Baton of its own, and an etcd with its
// data on disk.
type env struct {
	cfg      config
	root     string
	dir      string // temporary: logs, the Baton binary, data dirs
	pinned   bool
	pin      pinning
	noFile   uint64
	redis    *redistest.Server
	redisPID int
	stats    *redis.Client // one connection to redis, for INFO and the like
	etcd     *proc         // the memory cell's etcd, which every scenario uses
	etcdURL  string
	etcdDir  string
	batonBin string
	baton    *proc
	batonURL string
	hello    *proc
	helloURL string
	ref      *proc // baton-ref
	refURL   string
	refBin   string

	// the durable cell, for the uncontended scenario
	redisAOF    *redistest.Server
	redisAOFPID int
	statsAOF    *redis.Client
	batonAOF    *proc
	batonAOFURL string
	etcdDisk    *proc
	etcdDiskURL string
	etcdDiskDir string
	// the cluster scenario's processes, while it runs: counted by mark
	clusterPIDs []int
}

// newEnv starts redis-server and etcd, and builds and starts Baton. On error it
// stops what it started.
func newEnv(ctx context.Context, root string, cfg config) (e *env, err error) {
	e = &env{cfg: cfg, root: root}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.noFile = raiseNoFile(1 << 18)
	if e.dir, err = os.MkdirTemp("", "baton-bench-"); err != nil {
		return nil, err
	}
	cpus := machineCPUs()
	e.pinned = cpus >= 2 && os.Getenv(pinnedEnv) != ""
	e.pin = pinning{CPUs: cpus, Processes: map[string]string{}}
	if e.pinned {
		e.pin.Server, e.pin.Generator = strconv.Itoa(serverCPU), strconv.Itoa(generatorCPU)
		e.pin.Note = fmt.Sprintf("serving side (redis-server, baton, etcd) on CPU %d via sched_setaffinity/taskset; "+
			"load generator (this process, including the in-process redislock and redis-script clients, "+
			"and the helper processes that hold the waiters scenario's connections) on CPU %d "+
			"(re-executed under taskset -c %d)", serverCPU, generatorCPU, generatorCPU)
		e.pin.Processes["bench"] = allowedCPUs(os.Getpid())
	} else {
		e.pin.Note = fmt.Sprintf("not pinned: %d CPU(s) or taskset missing; everything shares the CPUs", cpus)
	}

	fmt.Println("starting redis-server ...")
	if e.redis, err = redistest.StartServer(e.dir, "--maxclients", "100000"); err != nil {
		return nil, err
	}
	if e.redisPID, err = redisPID(ctx, e.redis.Addr()); err != nil {
		return nil, err
	}
	if e.pinned {
		if err := pinProcess(e.redisPID, serverCPU); err != nil {
			return nil, err
		}
	}
	e.pin.Processes["redis-server"] = allowedCPUs(e.redisPID)
	e.stats = statsClient(e.redis.Addr())

	wantEtcd := cfg.wantSystem(sysEtcd) || cfg.wantSystem(sysEtcdLease)
	if wantEtcd && (cfg.wantScenario("uncontended") && cfg.wantDurability(durMemory) || cfg.wantScenario("handoff") || cfg.wantScenario("expiry_handoff")) {
		fmt.Println("starting etcd (data on tmpfs) ...")
		if e.etcd, e.etcdURL, e.etcdDir, err = e.startEtcd(ctx, true); err != nil {
			return nil, err
		}
		e.pin.Processes["etcd"] = allowedCPUs(e.etcd.pid())
	}
	durable := cfg.wantScenario("uncontended") && cfg.wantDurability(durDurable)
	if durable && wantEtcd {
		fmt.Println("starting etcd (data on disk) ...")
		if e.etcdDisk, e.etcdDiskURL, e.etcdDiskDir, err = e.startEtcd(ctx, false); err != nil {
			return nil, err
		}
		e.pin.Processes["etcd-disk"] = allowedCPUs(e.etcdDisk.pid())
	}
	if durable && (cfg.wantSystem(sysBaton) || cfg.wantSystem(sysRedisScript)) {
		fmt.Println("starting redis-server (appendonly yes, appendfsync always) ...")
		aofDir := filepath.Join(e.dir, "redis-aof")
		if err := os.MkdirAll(aofDir, 0o755); err != nil {
			return nil, err
		}
		if e.redisAOF, err = redistest.StartServer(aofDir, "--maxclients", "100000", "--appendonly", "yes", "--appendfsync", "always"); err != nil {
			return nil, err
		}
		if e.redisAOFPID, err = redisPID(ctx, e.redisAOF.Addr()); err != nil {
			return nil, err
		}
		if e.pinned {
			if err := pinProcess(e.redisAOFPID, serverCPU); err != nil {
				return nil, err
			}
		}
		e.pin.Processes["redis-server-aof"] = allowedCPUs(e.redisAOFPID)
		e.statsAOF = statsClient(e.redisAOF.Addr())
	}
	if cfg.wantSystem(sysBaton) {
		if cfg.batonBin != "" {
			e.batonBin = cfg.batonBin
			fmt.Printf("baton: %s (prebuilt)\n", e.batonBin)
		} else {
			fmt.Println("building baton ...")
			e.batonBin = filepath.Join(e.dir, "baton")
			if err := e.goBuild(ctx, e.root, e.batonBin); err != nil {
				return nil, err
			}
		}
		if e.baton, e.batonURL, err = e.startBaton(ctx); err != nil {
			return nil, err
		}
		e.pin.Processes["baton"] = allowedCPUs(e.baton.pid())
		if e.redisAOF != nil {
			if e.batonAOF, e.batonAOFURL, err = e.startBaton(ctx, "BATON_REDIS_URL="+e.redisAOF.URL()); err != nil {
				return nil, err
			}
			e.pin.Processes["baton-aof"] = allowedCPUs(e.batonAOF.pid())
		}
	}
	return e, e.startExtras(ctx)
}

// startExtras starts the hello server and baton-ref, for the scenarios and
// systems that use them.
func (e *env) startExtras(ctx context.Context) (err error) {
	c := e.cfg
	if c.wantSystem(sysHello) && c.wantScenario("uncontended") && c.wantDurability(durMemory) {
		if e.hello, e.helloURL, err = e.startHello(ctx); err != nil {
			return err
		}
		e.pin.Processes[sysHello] = allowedCPUs(e.hello.pid())
	}
	if c.ref == "" || !c.wantSystem(sysBatonRef) || !(c.wantScenario("uncontended") || c.wantScenario("handoff") || c.wantScenario("commands")) {
		return nil
	}
	fmt.Printf("building baton-ref (%s) ...\n", c.ref)
	if e.refBin, err = e.buildRef(ctx, c.ref); err != nil {
		return err
	}
	if e.ref, e.refURL, err = e.startBatonBin(ctx, e.refBin, "BATON_KEY_PREFIX="+refPrefix); err != nil {
		return err
	}
	e.pin.Processes[sysBatonRef] = allowedCPUs(e.ref.pid())
	return nil
}

// statsClient is one connection to the Redis at addr, for this program's own
// reads (INFO, SCAN, markers), apart from the load.
func statsClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ClientName: benchClientName, PoolSize: 1})
}

// batonSettings is how startBaton configures every Baton, for results.json.
const batonSettings = "BATON_LOG_LEVEL=warn BATON_MAX_WAIT=10m BATON_MAX_WAITERS=100000 BATON_MAX_CONNS=200000, other settings default"

func (e *env) setup() setup {
	s := setup{
		Redis:    "redis-server, no persistence (--save '' --appendonly no), shared by baton (and baton-ref), floor, redislock and redis-script",
		EtcdData: "tmpfs (/dev/shm): its fsyncs cost nothing, like Redis without persistence",
		Baton:    "built from the tree" + binaryCommit(e.batonBin) + "; " + batonSettings,
		Runs:     e.cfg.runs,
		Duration: fmt.Sprintf("%v measured after %v warm-up", e.cfg.duration, e.cfg.warmup),
		Loop:     "closed loop, latency per pair from its start",
		Names: fmt.Sprintf("a redis-server and a Baton of its own (BATON_FENCE_GUARD=%v), redis-script composed with the same guard; leases of %v; %d clients",
			e.cfg.namesGuard, e.cfg.namesGuard, namesClients),
	}
	if e.cfg.batonBin != "" {
		s.Baton = "prebuilt " + e.cfg.batonBin + binaryCommit(e.batonBin) + "; " + batonSettings
	}
	if e.ref != nil {
		s.Reference = "commit " + e.cfg.ref + ", built from a copy of its tree (git archive), BATON_KEY_PREFIX=" + refPrefix +
			", on the same redis-server; " + batonSettings
	}
	if !etcdOnTmpfs() {
		s.EtcdData = "disk (no /dev/shm on this machine): a temporary directory under " + os.TempDir()
	}
	if e.redisAOF != nil {
		s.Redis += "; durable cell: a redis-server of its own with --appendonly yes --appendfsync always (every write fsynced before the answer), " +
			"its files on disk under " + os.TempDir() + ", with a Baton of its own (baton) and redis-script"
	}
	if e.etcdDisk != nil {
		s.EtcdData += "; durable cell: an etcd of its own with its data on disk under " + os.TempDir() + " (it fsyncs its WAL on every write, as etcd is deployed)"
	}
	s.Durability = strings.Join(e.cfg.durabilities, ", ")
	if e.cfg.rate > 0 {
		s.Loop = fmt.Sprintf("open loop at %.0f pairs/s, latency from each pair's intended start", e.cfg.rate)
	}
	return s
}

// binaryCommit is " (commit X)" for a Go binary built in a git checkout (go
// build stamps the revision), with ", modified" when the checkout had changes;
// "" when the binary says nothing.
func binaryCommit(path string) string {
	if path == "" {
		return ""
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return ""
	}
	var rev, modified string
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.modified":
			modified = st.Value
		}
	}
	if rev == "" {
		return ""
	}
	rev = rev[:min(len(rev), 12)]
	if modified == "true" {
		return " (commit " + rev + ", modified)"
	}
	return " (commit " + rev + ")"
}

// cpuMark is a moment's CPU accounting, to tell this run's CPU use from other
// processes' on the same machine.
type cpuMark struct {
	at   time.Time
	busy time.Duration // all CPUs, all processes
	ours time.Duration // this process, its waited children, and the live serving processes
}

func (e *env) mark() cpuMark {
	ours, _ := cpuTime(os.Getpid())
	ours += childrenCPU()
	for _, pid := range e.servingPIDs() {
		if t, err := cpuTime(pid); err == nil {
			ours += t
		}
	}
	return cpuMark{at: time.Now(), busy: machineBusy(), ours: ours}
}

// servingPIDs are the live serving processes this run started and has not
// waited for yet.
func (e *env) servingPIDs() []int {
	var live []int
	for _, pid := range []int{e.redisPID, e.redisAOFPID} {
		if pid != 0 {
			live = append(live, pid)
		}
	}
	live = append(live, e.clusterPIDs...)
	for _, p := range []*proc{e.etcd, e.etcdDisk, e.baton, e.batonAOF, e.hello, e.ref} {
		if p != nil && p.alive() {
			live = append(live, p.pid())
		}
	}
	return live
}

// otherLoad is the share of the machine's CPU time (all CPUs) that processes
// other than this run's used between two marks, in percent. A Baton stopped in
// between has been waited for, so its time is in childrenCPU.
func (e *env) otherLoad(from, to cpuMark) float64 {
	total := to.at.Sub(from.at).Seconds() * float64(e.pin.CPUs)
	if total <= 0 {
		return 0
	}
	other := (to.busy - from.busy) - (to.ours - from.ours)
	return max(0, 100*other.Seconds()/total)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// close stops everything and removes the temporary files.
func (e *env) close() {
	for _, p := range []*proc{e.baton, e.batonAOF, e.ref, e.hello, e.etcd, e.etcdDisk} {
		if p != nil {
			p.stop(5 * time.Second)
		}
	}
	for _, c := range []*redis.Client{e.stats, e.statsAOF} {
		if c != nil {
			_ = c.Close()
		}
	}
	for _, r := range []*redistest.Server{e.redis, e.redisAOF} {
		if r != nil {
			r.Stop()
		}
	}
	for _, d := range []string{e.etcdDir, e.etcdDiskDir} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

func redisPID(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ClientName: benchClientName})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("redis INFO server has no process_id")
}

// goBuild builds the cmd/server of the module in dir into out, on all CPUs.
func (e *env) goBuild(ctx context.Context, dir, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	args := []string{goBin, "build", "-o", out, "./cmd/server"}
	if e.pinned {
		args = append([]string{"taskset", "-c", fmt.Sprintf("0-%d", e.pin.CPUs-1)}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/server: %w\n%s", err, b)
	}
	return nil
}

// startBaton starts a Baton on a free port, pinned with the serving side, and
// waits until it is ready. extra is more environment, NAME=value; it overrides
// the defaults (the names scenario points a Baton at its own Redis with it).
func (e *env) startBaton(ctx context.Context, extra ...string) (*proc, string, error) {
	return e.startBatonBin(ctx, e.batonBin, extra...)
}

// startBatonBin is startBaton with the server binary bin.
func (e *env) startBatonBin(ctx context.Context, bin string, extra ...string) (*proc, string, error) {
	var last error
	for range 3 {
		port, err := redistest.FreePort()
		if err != nil {
			return nil, "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		p, err := startProc(e.dir, "baton-"+strconv.Itoa(port), e.pinned, append([]string{
			"BATON_ADDR=" + addr,
			"BATON_REDIS_URL=" + e.redis.URL(),
			"BATON_LOG_LEVEL=warn",
			"BATON_MAX_WAIT=10m",
			"BATON_MAX_WAITERS=100000",
			// The waiters scenario opens as many connections as the open-file
			// limit allows: past the default limit (three quarters of it).
			"BATON_MAX_CONNS=200000",
		}, extra...), bin)
		if err != nil {
			return nil, "", err
		}
		url := "http://" + addr
		if last = waitHTTP(ctx, p, url+"/readyz", nil); last == nil {
			return p, url, nil
		}
		p.stop(time.Second)
		last = fmt.Errorf("baton: %w\n%s", last, p.logTail())
	}
	return nil, "", last
}

// etcdOnTmpfs reports whether /dev/shm is there for the memory cell's etcd.
func etcdOnTmpfs() bool {
	st, err := os.Stat("/dev/shm")
	return err == nil && st.IsDir()
}

// startEtcd starts a single-member etcd. With tmpfs its data directory is on
// /dev/shm, where fsyncs cost nothing, like Redis without persistence (the
// memory cell); without, a temporary one on disk, as etcd is deployed (it
// fsyncs its WAL on every write: the durable cell).
func (e *env) startEtcd(ctx context.Context, tmpfs bool) (p *proc, url, dir string, err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, "", "", errors.New("etcd not found: run `make bench`, which installs it, or `apt-get install etcd-server`")
	}
	base := e.dir
	if tmpfs && etcdOnTmpfs() {
		base = "/dev/shm"
	}
	name := "etcd-disk"
	if tmpfs {
		name = "etcd"
	}
	var last error
	for range 3 {
		if dir, err = os.MkdirTemp(base, "baton-bench-etcd-"); err != nil {
			return nil, "", "", err
		}
		cp, err1 := redistest.FreePort()
		pp, err2 := redistest.FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, "", "", err
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", cp)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
		p, err := startProc(e.dir, name, e.pinned, nil, bin,
			"--data-dir", dir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "default="+peer,
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
		if err != nil {
			return nil, "", "", err
		}
		healthy := func(b []byte) bool {
			var h struct{ Health string }
			return json.Unmarshal(b, &h) == nil && h.Health == "true"
		}
		if last = waitHTTP(ctx, p, client+"/health", healthy); last == nil {
			return p, client, dir, nil
		}
		p.stop(time.Second)
		_ = os.RemoveAll(dir)
		last = fmt.Errorf("%s: %w\n%s", name, last, p.logTail())
	}
	return nil, "", "", last
}

// waitHTTP polls url until it answers 200 (and ok accepts the body), the process
// exits, or 20 s pass.
func waitHTTP(ctx context.Context, p *proc, url string, ok func([]byte) bool) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if !p.alive() {
			return fmt.Errorf("%s exited", p.name)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := hc.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (ok == nil || ok(b)) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on but the port
	}
	return fmt.Errorf("%s did not get ready at %s", p.name, url)
}

// batonPIDs is the serving side of Baton: its process and Redis.
func (e *env) batonPIDs() []int { return []int{e.baton.pid(), e.redisPID} }
