package deploy

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// testGlobal stands in for the global section of Debian's haproxy.cfg, which
// haproxy.cfg expects in front of it: here only a log, to stderr, so that the
// test can read what HAProxy would log.
const testGlobal = `global
    log stderr format raw local0 info
`

// haproxy is one HAProxy process running ./haproxy.cfg, the shipped file.
type haproxy struct {
	URL      string // where clients connect
	statsURL string

	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
}

// startHAProxy runs HAProxy in front of the given replica addresses (one per
// server line of haproxy.cfg) on free loopback ports, and stops it when the
// test ends.
func startHAProxy(t *testing.T, replicas []string) *haproxy {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy not found: run `make test`, which installs it, or `apt-get install haproxy`")
	}
	global := filepath.Join(t.TempDir(), "global.cfg")
	if err := os.WriteFile(global, []byte(testGlobal), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-q", "-f", global, "-f", "haproxy.cfg").CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	var last error
	for range 5 { // a free port may be taken before HAProxy binds it
		h, err := tryHAProxy(bin, global, replicas)
		if err == nil {
			t.Cleanup(h.stop)
			return h
		}
		last = err
	}
	t.Fatal(last)
	return nil
}

func tryHAProxy(bin, global string, replicas []string) (*haproxy, error) {
	listen, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	stats, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	h := &haproxy{
		URL:      fmt.Sprintf("http://127.0.0.1:%d", listen),
		statsURL: fmt.Sprintf("http://127.0.0.1:%d/;csv", stats),
		logs:     &lockedBuffer{},
		exited:   make(chan struct{}),
	}
	// -db: stay in the foreground, as under systemd.
	h.cmd = exec.Command(bin, "-db", "-f", global, "-f", "haproxy.cfg")
	h.cmd.Env = append(os.Environ(),
		"BATON_LISTEN=127.0.0.1:"+strconv.Itoa(listen), "HAPROXY_STATS=127.0.0.1:"+strconv.Itoa(stats))
	for i, addr := range replicas {
		h.cmd.Env = append(h.cmd.Env, fmt.Sprintf("BATON%d=%s", i+1, addr))
	}
	h.cmd.Stdout, h.cmd.Stderr = h.logs, h.logs
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w", err)
	}
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-h.exited:
			return nil, fmt.Errorf("haproxy exited: %s", h.logs)
		default:
		}
		if _, err := h.servers(); err == nil {
			return h, nil
		}
		time.Sleep(10 * time.Millisecond) // nothing to await but the port itself
	}
	h.stop()
	return nil, fmt.Errorf("haproxy did not serve its stats page: %s", h.logs)
}

func (h *haproxy) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}

// Log is what HAProxy printed: its request log and its notices.
func (h *haproxy) Log() string { return h.logs.String() }

// stat is one row of HAProxy's CSV statistics, by column name.
type stat map[string]string

func (s stat) int(col string) int {
	n, _ := strconv.Atoi(s[col])
	return n
}

// stats reads HAProxy's statistics: one row per proxy and server, keyed
// "proxy/server" ("batons/baton1", "baton/FRONTEND", "batons/BACKEND").
func (h *haproxy) stats() (map[string]stat, error) {
	res, err := http.Get(h.statsURL)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stats page: %s", res.Status)
	}
	r := csv.NewReader(res.Body)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New("stats page: empty")
	}
	head := rows[0]
	head[0] = strings.TrimPrefix(head[0], "# ")
	out := make(map[string]stat, len(rows)-1)
	for _, row := range rows[1:] {
		s := stat{}
		for i, v := range row {
			if i < len(head) {
				s[head[i]] = v
			}
		}
		out[s["pxname"]+"/"+s["svname"]] = s
	}
	return out, nil
}

// servers is the status HAProxy gives each Baton ("UP", "DOWN", "UP 1/2"
// while going down, "DOWN 1/2" while coming up, ...), by server name.
func (h *haproxy) servers() (map[string]string, error) {
	all, err := h.stats()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range all {
		if s["pxname"] == "batons" && s["svname"] != "BACKEND" {
			out[s["svname"]] = s["status"]
		}
	}
	if len(out) == 0 {
		return nil, errors.New("stats page: no servers in backend batons")
	}
	return out, nil
}

// await polls the stats page until server's status satisfies ok, and returns
// how long that took. HAProxy announces nothing: its stats are what there is.
func (h *haproxy) await(t *testing.T, server string, ok func(status string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for deadline := start.Add(20 * time.Second); time.Now().Before(deadline); {
		st, err := h.servers()
		if err == nil {
			if last = st[server]; ok(last) {
				return time.Since(start)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("HAProxy: %s still %q after 20s", server, last)
	return 0
}

func isUp(status string) bool { return status == "UP" }
func isDown(status string) bool {
	return strings.HasPrefix(status, "DOWN") || strings.HasPrefix(status, "MAINT")
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
