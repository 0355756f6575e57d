// Package batontest runs a real Baton server for the tests of the clients and
// the CLI: the server binary built from this tree, on a redis-server of its own,
// both on free loopback ports, with a set of API keys and a fault-injecting
// proxy in front. Tests in other languages (pytest, PHPUnit) are driven by a Go
// test that starts a Server and hands them Env.
package batontest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/internal/redistest"
)

// Keys are the API keys a keys-mode Server accepts, by what they may do:
// Full (every action on every lock), Limited (lock and read on "client:*"
// and "cli:*"), Reader (read on every lock).
type Keys struct {
	Full, Limited, Reader string
}

// Options tune Start.
type Options struct {
	Keys bool     // keys mode (else protected mode: loopback clients may do everything)
	Env  []string // more BATON_* settings, e.g. "BATON_TICKET_TTL=2s"
	// Redis, when set, is the redis-server to use instead of one of its own:
	// several Servers on one Redis are replicas of one deployment.
	Redis *redistest.Server
}

// Server is one Baton process and its redis-server.
type Server struct {
	URL   string // http://127.0.0.1:port
	Addr  string
	Redis *redistest.Server
	Keys  Keys // set in keys mode
	Proxy *FaultProxy

	t    testing.TB
	env  []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds ./cmd/server once per test process and returns its path.
func Binary() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-test-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "baton-server")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/server")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build the server: %v\n%s", err, out)
		}
	})
	return binPath, buildErr
}

// Start starts a Server and stops it when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, Redis: o.Redis}
	if s.Redis == nil {
		s.Redis = redistest.Start(t)
	}
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.URL = "http://" + s.Addr
	s.env = append([]string{
		"BATON_ADDR=" + s.Addr, "BATON_REDIS_URL=" + s.Redis.URL(), "BATON_LOG_LEVEL=warn",
		"BATON_SHUTDOWN_DELAY=0s", "BATON_KEY_PREFIX=bt",
	}, o.Env...)
	if o.Keys {
		s.Keys = Keys{Full: auth.NewKey(), Limited: auth.NewKey(), Reader: auth.NewKey()}
		file := filepath.Join(t.TempDir(), "keys.yaml")
		body := fmt.Sprintf(`keys:
  - name: full
    sha256: %s
    allow:
      - names: "*"
        actions: [admin, metrics]
  - name: limited
    sha256: %s
    allow:
      - names: "client:*"
        actions: [lock, read]
      - names: "cli:*"
        actions: [lock, read]
  - name: reader
    sha256: %s
    allow:
      - names: "*"
        actions: [read]
`, auth.KeySHA256(s.Keys.Full), auth.KeySHA256(s.Keys.Limited), auth.KeySHA256(s.Keys.Reader))
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s.env = append(s.env, "BATON_AUTH_FILE="+file)
	}
	_ = bin
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	s.Proxy = startFaultProxy(t, s.Addr)
	return s
}

func (s *Server) start() error {
	bin, _ := Binary()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), s.env...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.logs, s.done = cmd, logs, done
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("baton exited: %s", logs.String())
		default:
		}
		r, err := http.Get(s.URL + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on but the port itself
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("baton did not get ready: %s", logs.String())
}

// Stop ends the server (SIGTERM, then SIGKILL after 15 s).
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart stops the server and starts it again on the same port.
func (s *Server) Restart() error {
	s.Stop()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // the port may take a moment to be free again
	}
	return err
}

// Logs is what the server printed.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// Env is the environment a test in another language gets: BATON_URL (the
// server), BATON_PROXY_URL (the fault proxy in front of it) and
// BATON_PROXY_CONTROL (its control URL, see FaultProxy), and in keys mode
// BATON_TEST_KEY_FULL, BATON_TEST_KEY_LIMITED and BATON_TEST_KEY_READER.
func (s *Server) Env() []string {
	env := []string{"BATON_URL=" + s.URL, "BATON_PROXY_URL=" + s.Proxy.URL, "BATON_PROXY_CONTROL=" + s.Proxy.ControlURL}
	if s.Keys.Full != "" {
		env = append(env, "BATON_TEST_KEY_FULL="+s.Keys.Full, "BATON_TEST_KEY_LIMITED="+s.Keys.Limited,
			"BATON_TEST_KEY_READER="+s.Keys.Reader)
	}
	return env
}

// Ctx is a context for a call to the server from a test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// lockedBuffer is the server's output: the process writes it (through the
// goroutine os/exec copies with) while tests read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
