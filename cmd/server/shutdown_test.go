package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM: /readyz turns 503, long-polls are answered at once with their "still
// waiting" answer, and the process exits within its shutdown timeout.
func TestSIGTERMShutdown(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "baton")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "BATON_ADDR="+addr, "BATON_REDIS_URL=",
		// The delay outlasts answering the long-polls and asking /readyz on a
		// loaded machine: the test asks it during the delay.
		"BATON_SHUTDOWN_DELAY=6s", "BATON_SHUTDOWN_TIMEOUT=8s")
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", logs)
		}
	})
	base := "http://" + addr
	waitFor(t, "readyz 200", func() bool {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})

	if st, _, _ := call(t, "POST", base+"/v1/locks/busy", `{"ttl_ms": 60000}`); st != http.StatusCreated {
		t.Fatalf("holder: %d", st)
	}
	st, _, ticket := call(t, "POST", base+"/v1/locks/busy", `{"fair": true}`)
	if st != http.StatusAccepted {
		t.Fatalf("ticket: %d", st)
	}
	type answer struct {
		what   string
		status int
	}
	answers := make(chan answer, 3)
	longPoll := func(what, method, url, body string) {
		st, _, _ := call(t, method, url, body)
		answers <- answer{what, st}
	}
	go longPoll("acquire", "POST", base+"/v1/locks/busy", `{"wait_ms": 30000}`)
	go longPoll("ticket", "GET", base+ticket["url"].(string)+"?wait_ms=30000", "")
	go longPoll("watch", "GET", base+"/v1/locks/busy?wait_ms=30000", "")
	waitFor(t, "3 waiters", func() bool { return gauge(base, "baton_waiters") == 3 })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	want := map[string]int{"acquire": http.StatusLocked, "ticket": http.StatusAccepted, "watch": http.StatusOK}
	for range 3 {
		a := <-answers
		if a.status != want[a.what] {
			t.Errorf("%s answered %d at shutdown, want %d", a.what, a.status, want[a.what])
		}
	}
	t.Logf("long-polls answered %v after SIGTERM", time.Since(sent))
	if time.Since(sent) > 3*time.Second {
		t.Errorf("long-polls took %v to be answered, want at once, not at their 30 s waits' end", time.Since(sent))
	}
	res, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatalf("readyz during the shutdown delay: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz during shutdown: %d, want 503", res.StatusCode)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
		t.Logf("exited %v after SIGTERM", time.Since(sent))
	case <-time.After(6*time.Second + 8*time.Second + 5*time.Second):
		t.Fatal("did not exit within its shutdown delay and timeout")
	}
}

// waitFor polls cond (there is no event to await across a process boundary).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gauge reads one unlabelled metric from /metrics.
func gauge(base, name string) float64 {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// A second SIGTERM or SIGINT during the shutdown ends the process at once, with
// a non-zero exit code and a log line that says so.
func TestSecondSignalForcesExit(t *testing.T) {
	tests := []struct {
		name string
		give [2]syscall.Signal
	}{
		{name: "SIGTERM twice", give: [2]syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}},
		{name: "SIGINT then SIGTERM", give: [2]syscall.Signal{syscall.SIGINT, syscall.SIGTERM}},
		{name: "SIGTERM then SIGINT", give: [2]syscall.Signal{syscall.SIGTERM, syscall.SIGINT}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startBaton(t, "baton", "", "BATON_SHUTDOWN_DELAY=60s")
			if err := p.cmd.Process.Signal(tt.give[0]); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the shutdown to begin", func() bool { return strings.Contains(p.logs.String(), "shutting down") })
			sent := time.Now()
			if err := p.cmd.Process.Signal(tt.give[1]); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.exited:
			case <-time.After(5 * time.Second):
				t.Fatalf("still running 5s after a second %v (shutdown delay 60s)", tt.give[1])
			}
			t.Logf("exited %v after the second signal", time.Since(sent))
			if code := p.cmd.ProcessState.ExitCode(); code == 0 {
				t.Errorf("exit code 0 after a forced exit, want non-zero")
			}
			if !strings.Contains(p.logs.String(), "second signal") {
				t.Errorf("no log line about the second signal:\n%s", p.logs)
			}
		})
	}
}
