package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/batontest"
)

// The CLI's tests run the built binary against a real Baton server with API
// keys (internal/batontest). baton gets BATON_URL and the limited key (lock
// and read on cli:*) in its environment; admin is the test's own client.

type cliEnv struct {
	t     *testing.T
	s     *batontest.Server
	admin *client.Client
	env   []string
}

func startCLI(t *testing.T) *cliEnv {
	t.Helper()
	s := batontest.Start(t, batontest.Options{Keys: true})
	return &cliEnv{t: t, s: s, admin: client.New(s.URL, client.WithAPIKey(s.Keys.Full)),
		env: []string{"BATON_URL=" + s.URL, "BATON_API_KEY=" + s.Keys.Limited}}
}

// command is baton with args and the environment's BATON_* settings.
func (e *cliEnv) command(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), e.env...)
	return cmd
}

// run runs baton to its end and returns its output and exit status.
func (e *cliEnv) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var o, er bytes.Buffer
	cmd := e.command(args...)
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	e.noKey(o.String() + er.String())
	return o.String(), er.String(), code
}

// noKey fails the test if out shows one of the server's keys.
func (e *cliEnv) noKey(out string) {
	e.t.Helper()
	for _, k := range []string{e.s.Keys.Full, e.s.Keys.Limited, e.s.Keys.Reader} {
		if strings.Contains(out, k) {
			e.t.Fatalf("baton printed an API key: %q", out)
		}
	}
}

func (e *cliEnv) state(name string) *client.LockState {
	e.t.Helper()
	st, err := e.admin.State(batontest.Ctx(e.t), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *cliEnv) hold(name string, o client.AcquireOptions) *client.Lease {
	e.t.Helper()
	res, err := e.admin.Acquire(batontest.Ctx(e.t), name, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Lease
}

// proc is a baton process running in the background, its stdout read line
// by line.
type proc struct {
	t      *testing.T
	e      *cliEnv
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan struct{}
	out    syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (e *cliEnv) start(args ...string) *proc {
	e.t.Helper()
	p := &proc{t: e.t, e: e, cmd: e.command(args...), lines: make(chan string, 100), stderr: &syncBuffer{}, done: make(chan struct{})}
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(w, &p.out), p.stderr
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() { _ = p.cmd.Wait(); w.Close(); close(p.done) }()
	e.t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	return p
}

// expect waits for a line of stdout that contains want.
func (p *proc) expect(want string) string {
	p.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("stdout ended without %q; stderr %q", want, p.stderr.String())
			}
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			p.t.Fatalf("no line with %q in 10 s; stderr %q", want, p.stderr.String())
		}
	}
}

// wait waits for baton's end and returns its exit status.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Fatalf("baton still runs; stderr %q", p.stderr.String())
	}
	p.e.noKey(p.out.String() + p.stderr.String())
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(sig os.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func TestLockRunsCommand(t *testing.T) {
	e := startCLI(t)
	stdout, stderr, code := e.run("lock", "--owner", "cron@db1", "cli:env", "--",
		"sh", "-c", `echo "$BATON_LOCK_HELD $BATON_FENCE $BATON_LEASE_URL $BATON_LOCK_NAME"; exit 7`)
	if code != 7 {
		t.Fatalf("exit %d, want COMMAND's 7; stderr %q", code, stderr)
	}
	f := strings.Fields(stdout)
	if len(f) != 4 || f[0] != "true" || f[1] == "" || f[1] == "0" ||
		!strings.HasPrefix(f[2], e.s.URL+"/v1/locks/cli:env/leases/") || f[3] != "cli:env" {
		t.Fatalf("COMMAND saw %q", stdout)
	}
	st := e.state("cli:env")
	if st.Held || st.Fence == 0 {
		t.Fatalf("after COMMAND: %+v, want released", st)
	}

	// flock's forms: COMMAND right after NAME, and -c.
	if _, stderr, code := e.run("lock", "-x", "cli:env", "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("flock form: exit %d; %s", code, stderr)
	}
	if stdout, _, code := e.run("lock", "cli:env", "-c", "echo $BATON_LOCK_HELD"); code != 0 || stdout != "true\n" {
		t.Fatalf("-c: exit %d, %q", code, stdout)
	}
	if _, stderr, code := e.run("lock", "cli:env", "--", "/nonexistent/cmd"); code != 127 || !strings.Contains(stderr, "/nonexistent/cmd") {
		t.Fatalf("missing COMMAND: exit %d, %q", code, stderr)
	}
	if st := e.state("cli:env"); st.Held {
		t.Fatalf("after a COMMAND that could not start: %+v", st)
	}
}

func TestLockConflict(t *testing.T) {
	e := startCLI(t)
	e.hold("cli:busy", client.AcquireOptions{TTL: 60 * time.Second, Owner: "someone"})
	marker := filepath.Join(t.TempDir(), "ran")
	tests := []struct {
		give     []string
		wantCode int
		wantErr  string // in stderr; "" means stderr must be empty
	}{
		{[]string{"-n"}, 1, ""},
		{[]string{"-n", "-E", "9"}, 9, ""},
		{[]string{"--nonblock", "--conflict-exit-code=0"}, 0, ""},
		{[]string{"-n", "-v"}, 1, `"cli:busy" is held by someone for `},
		{[]string{"-w", "0.3"}, 1, ""},
		{[]string{"--fair", "-w", "0.3", "-v"}, 1, "left the fair queue"},
	}
	for _, tt := range tests {
		args := append(append([]string{"lock"}, tt.give...), "cli:busy", "--", "touch", marker)
		start := time.Now()
		_, stderr, code := e.run(args...)
		if code != tt.wantCode || (tt.wantErr == "") != (stderr == "") || !strings.Contains(stderr, tt.wantErr) {
			t.Errorf("baton %q: exit %d, stderr %q; want %d, %q", args, code, stderr, tt.wantCode, tt.wantErr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("baton %q ran COMMAND without the lock", args)
		}
		if took := time.Since(start); tt.give[0] == "-w" && (took < 300*time.Millisecond || took > 10*time.Second) {
			t.Errorf("baton %q gave up after %v", args, took)
		}
	}
	if st := e.state("cli:busy"); st.Waiters != 0 {
		t.Fatalf("a ticket was left behind: %+v", st)
	}

	// A wait long enough: the holder's lease runs out, and COMMAND runs.
	e.hold("cli:soon", client.AcquireOptions{TTL: 500 * time.Millisecond})
	if stdout, stderr, code := e.run("lock", "-w", "10", "cli:soon", "--", "echo", "ran"); code != 0 || stdout != "ran\n" {
		t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
	}
}

// When the hold is lost, COMMAND gets SIGTERM (then SIGKILL) and baton exits 5.
func TestLockLost(t *testing.T) {
	e := startCLI(t)
	p := e.start("lock", "--ttl", "1", "cli:lost", "--", "sh", "-c",
		`trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	p.expect("ready")
	if _, err := e.admin.ForceRelease(batontest.Ctx(t), "cli:lost"); err != nil {
		t.Fatal(err)
	}
	p.expect("got TERM")
	if code := p.wait(); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitLost, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), `lock "cli:lost" lost`) {
		t.Fatalf("stderr %q", p.stderr.String())
	}

	// A COMMAND that ignores SIGTERM is killed --kill-after later.
	p = e.start("lock", "--ttl", "1", "--kill-after", "0.3", "cli:lost", "--", "sh", "-c",
		`trap '' TERM; echo ready; exec sleep 30`)
	p.expect("ready")
	if _, err := e.admin.ForceRelease(batontest.Ctx(t), "cli:lost"); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != exitLost || !strings.Contains(p.stderr.String(), "SIGKILL") {
		t.Fatalf("exit %d, stderr %q", code, p.stderr.String())
	}
}

// SIGTERM to baton reaches COMMAND; the lock is released once COMMAND exits,
// and baton exits with COMMAND's status. A signal while waiting leaves the queue.
func TestLockForwardsSignals(t *testing.T) {
	e := startCLI(t)
	p := e.start("lock", "--ttl", "2", "cli:sig", "--", "sh", "-c",
		`trap 'echo got TERM; sleep 0.2; exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	p.expect("ready")
	if st := e.state("cli:sig"); !st.Held {
		t.Fatalf("while COMMAND runs: %+v", st)
	}
	p.signal(syscall.SIGTERM)
	p.expect("got TERM")
	if st := e.state("cli:sig"); !st.Held {
		t.Fatalf("while COMMAND winds down: %+v, want still held", st)
	}
	if code := p.wait(); code != 3 {
		t.Fatalf("exit %d, want COMMAND's 3; stderr %q", code, p.stderr.String())
	}
	if st := e.state("cli:sig"); st.Held {
		t.Fatalf("after COMMAND: %+v", st)
	}

	e.hold("cli:sigwait", client.AcquireOptions{TTL: 20 * time.Second})
	p = e.start("lock", "--fair", "cli:sigwait", "--", "echo", "ran")
	deadline := time.Now().Add(10 * time.Second)
	for e.state("cli:sigwait").Waiters != 1 {
		if time.Now().After(deadline) {
			t.Fatal("baton did not queue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 128+int(syscall.SIGINT) || strings.Contains(p.out.String(), "ran") {
		t.Fatalf("exit %d, stdout %q", code, p.out.String())
	}
	if st := e.state("cli:sigwait"); st.Waiters != 0 {
		t.Fatalf("the ticket was left: %+v", st)
	}
}

func TestStatus(t *testing.T) {
	e := startCLI(t)
	if stdout, stderr, code := e.run("status", "cli:st"); code != 0 || stdout != "cli:st: free\n" {
		t.Fatalf("free: exit %d, %q, %q", code, stdout, stderr)
	}
	l := e.hold("cli:st", client.AcquireOptions{TTL: 20 * time.Second, Owner: "alice"})
	stdout, _, code := e.run("status", "cli:st")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	want := "cli:st: held (exclusive) by alice, fence "
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], ", 0 waiting") ||
		!strings.Contains(lines[1], "count 1") || !strings.HasSuffix(lines[1], "alice") || strings.Contains(stdout, l.ID) {
		t.Fatalf("held: exit %d, %q", code, stdout)
	}
	stdout, _, code = e.run("status", "--json", "cli:st")
	var body map[string]any
	if err := json.Unmarshal([]byte(stdout), &body); code != 0 || err != nil || body["name"] != "cli:st" || body["held"] != true {
		t.Fatalf("--json: exit %d, %q, %v", code, stdout, err)
	}
	if _, err := e.admin.Release(batontest.Ctx(t), "cli:st", l.ID); err != nil {
		t.Fatal(err)
	}
	if stdout, _, _ := e.run("status", "cli:st"); !strings.HasPrefix(stdout, "cli:st: free (last fence ") {
		t.Fatalf("released: %q", stdout)
	}

	for i := range 2 {
		e.hold("cli:sem", client.AcquireOptions{Shared: true, Limit: 3, Owner: "reader-" + string(rune('1'+i))})
	}
	stdout, _, _ = e.run("status", "cli:sem")
	if !strings.HasPrefix(stdout, "cli:sem: held (shared, 2 holds of at most 3) by reader-2") || strings.Count(stdout, "\n") != 3 {
		t.Fatalf("shared: %q", stdout)
	}
}

func TestWatch(t *testing.T) {
	e := startCLI(t)
	p := e.start("watch", "--interval", "0.1", "cli:w")
	p.expect("cli:w: free")
	l := e.hold("cli:w", client.AcquireOptions{TTL: 20 * time.Second, Owner: "bob"})
	p.expect("cli:w: held (exclusive) by bob")
	if _, err := e.admin.Release(batontest.Ctx(t), "cli:w", l.ID); err != nil {
		t.Fatal(err)
	}
	p.expect("cli:w: free (last fence")
	e.hold("cli:w", client.AcquireOptions{TTL: 2 * time.Second, Owner: "carol"}) // seen before it runs out, however loaded the machine
	p.expect("by carol")
	p.expect("cli:w: free") // it ran out
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, p.stderr.String())
	}
}

func TestRelease(t *testing.T) {
	e := startCLI(t)
	e.hold("cli:r", client.AcquireOptions{TTL: 20 * time.Second})
	if _, stderr, code := e.run("release", "cli:r"); code != exitUsage || !strings.Contains(stderr, "needs --force") {
		t.Fatalf("without --force: exit %d, %q", code, stderr)
	}
	if _, stderr, code := e.run("release", "--force", "cli:r"); code != exitDenied || !strings.Contains(stderr, "forbidden (403)") {
		t.Fatalf("without admin: exit %d, %q", code, stderr)
	}
	if stdout, stderr, code := e.run("--key", e.s.Keys.Full, "release", "--force", "cli:r"); code != 0 || stdout != "cli:r: released by force\n" {
		t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
	}
	if stdout, _, code := e.run("release", "--force", "--key", e.s.Keys.Full, "cli:r"); code != 0 || stdout != "cli:r: was not held\n" {
		t.Fatalf("again: exit %d, %q", code, stdout)
	}
}

// A refused key is exit 4 with the server's reason, and the key is never
// shown; an unreachable server is exit 3; a bad name is a usage error.
func TestServerErrors(t *testing.T) {
	e := startCLI(t)
	bad := "bk_" + strings.Repeat("Q", 43)
	tests := []struct {
		give     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"--key", bad, "status", "cli:x"}, exitDenied, "unauthorized (401)"},
		{[]string{"lock", "--key=" + bad, "cli:x", "--", "true"}, exitDenied, "BATON_API_KEY"},
		{[]string{"lock", "other:x", "--", "true"}, exitDenied, `"other:x": forbidden (403)`},
		{[]string{"status", "bad/name"}, exitUsage, "invalid-name"},
		{[]string{"lock", "--ttl", "0.01", "cli:x", "--", "true"}, exitUsage, "invalid-request"},
		{[]string{"--url", "http://127.0.0.1:1", "--retry-max-time", "0.2", "lock", "cli:x", "--", "true"}, exitServer, "connection refused"},
	}
	for _, tt := range tests {
		stdout, stderr, code := e.run(tt.give...)
		if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) || strings.Contains(stderr, bad) || stdout != "" {
			t.Errorf("baton %q: exit %d, stdout %q, stderr %q; want %d, %q", tt.give, code, stdout, stderr, tt.wantCode, tt.wantErr)
		}
	}
}

func TestCLIUsageErrors(t *testing.T) {
	tests := []struct {
		give    []string
		wantErr string
	}{
		{[]string{"lock"}, "give the lock's NAME"},
		{[]string{"lock", "x"}, "give a COMMAND"},
		{[]string{"lock", "x", "--"}, "give a COMMAND"},
		{[]string{"lock", "x", "y", "--", "true"}, "give one NAME before --"},
		{[]string{"lock", "-n", "-w", "1", "x", "--", "true"}, "-n and -w exclude each other"},
		{[]string{"lock", "--limit", "2", "x", "--", "true"}, "--limit N needs -s"},
		{[]string{"lock", "-E", "300", "x", "--", "true"}, "-E must be 0 to 255"},
		{[]string{"lock", "-c", "true", "x", "--", "true"}, "not both"},
		{[]string{"lock", "--bogus", "x", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"status"}, "give exactly one NAME"},
		{[]string{"watch", "a", "b"}, "give exactly one NAME"},
		{[]string{"release", "--force"}, "give exactly one NAME"},
		{[]string{"--bogus", "status", "x"}, "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		stdout, stderr, code := baton(t, tt.give...)
		if code != exitUsage || !strings.Contains(stderr, tt.wantErr) || stdout != "" {
			t.Errorf("baton %q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.give, code, stdout, stderr, tt.wantErr)
		}
	}
	for _, give := range [][]string{{"--help"}, {"help"}, {"lock", "--help"}, {"status", "-h"}, {"watch", "--help"}, {"release", "--help"}} {
		stdout, _, code := baton(t, give...)
		if code != 0 || !strings.Contains(stdout, "usage: baton") {
			t.Errorf("baton %q: exit %d, %q", give, code, stdout)
		}
	}
	stdout, _, _ := baton(t, "--help")
	for _, want := range []string{"Exit status", "5    lock: the lock was lost", "BATON_URL", "BATON_API_KEY"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// A 503, store-unavailable or overloaded, is waited out (its Retry-After,
// 1 s here) by lock and by watch alike.
func TestOverloadedIsWaitedOutLikeStoreUnavailable(t *testing.T) {
	e := startCLI(t)
	e.env = []string{"BATON_URL=" + e.s.Proxy.URL, "BATON_API_KEY=" + e.s.Keys.Limited}
	for _, kind := range []string{"store-unavailable", "overloaded"} {
		name := "cli:busy-" + kind
		e.s.Proxy.Problem(503, kind, 2, "/v1/locks/"+name)
		start := time.Now()
		if _, stderr, code := e.run("lock", name, "--", "true"); code != 0 {
			t.Fatalf("%s: lock: exit %d; %s", kind, code, stderr)
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Fatalf("%s: lock took %v through two 503s with Retry-After: 1, want at least 2s", kind, took)
		}

		e.s.Proxy.Problem(503, kind, 2, "/v1/locks/"+name)
		start = time.Now()
		p := e.start("watch", name)
		p.expect(name + ": free")
		if took := time.Since(start); took < 2*time.Second {
			t.Fatalf("%s: watch answered after %v through two 503s with Retry-After: 1, want at least 2s", kind, took)
		}
		p.signal(syscall.SIGINT)
		if code := p.wait(); code != 0 {
			t.Fatalf("%s: watch: exit %d; stderr %q", kind, code, p.stderr.String())
		}
	}
}
