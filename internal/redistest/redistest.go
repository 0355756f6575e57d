// Package redistest runs real redis-server processes for tests, each on a free
// loopback port, and removes them afterwards. It never assumes a Redis on 6379.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Port int
	args []string
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Binary returns the path of redis-server, or an error that says how to get it.
func Binary() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server not found: run `make test`, which installs it, or `apt-get install redis-server`")
	}
	return p, nil
}

// Start starts a redis-server with no persistence (plus extra arguments) and stops
// it when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := StartServer(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts a redis-server whose files go to dir; for TestMain, where
// there is no testing.TB. The caller stops it.
func StartServer(dir string, extra ...string) (*Server, error) {
	var last error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--protected-mode", "no",
		}, extra...)
		if slices.Contains(extra, "--cluster-enabled") {
			// A cluster node's bus port is its port + 10000 unless told: past
			// 55535 that is no port at all, and below it often one another
			// process holds. A free port of its own, checked like the first.
			bus, err := FreePort()
			if err != nil {
				return nil, err
			}
			s.args = append(s.args, "--cluster-port", strconv.Itoa(bus))
		}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

// FreePort is a TCP port free on loopback right now, for a process to listen on
// (another process may take it first; callers that start servers retry).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, s.args...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.out = cmd, out
	s.mu.Unlock()

	return awaitPing("redis-server", s.Addr(), cmd, exited, out)
}

// awaitPing waits until the process at addr answers PING, for at most 10 s; it
// kills the process when it does not, and reports its output when it exited.
func awaitPing(what, addr string, cmd *exec.Cmd, exited <-chan struct{}, out *bytes.Buffer) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return fmt.Errorf("%s on %s exited: %s", what, addr, out.String())
		default:
		}
		if c.Ping(context.Background()).Err() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond) // nothing to wait on but the port itself
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("%s on %s did not answer: %s", what, addr, out.String())
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a plain client for inspecting the server; closed by Cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_, _ = s.cmd.Process.Wait()
		s.cmd = nil
	}
}

// Freeze stops the server with SIGSTOP: it keeps its connections open and reads
// nothing, as a Redis stalled by a long fork, swap or pause would. Thaw resumes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port, empty (no persistence).
func (s *Server) Restart() error {
	s.Kill()
	var err error
	for range 50 { // the port may take a moment to be free again
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes nothing else: its dir belongs to the caller.
func (s *Server) Stop() { s.Kill() }

// Log is what the server printed, for failure messages.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

// MustStartMain is for TestMain: it starts a server in a temporary directory, or
// prints why not and exits.
func MustStartMain() (*Server, func()) {
	dir, err := os.MkdirTemp("", "baton-redis-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s, err := StartServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return s, func() { s.Stop(); _ = os.RemoveAll(dir) }
}
