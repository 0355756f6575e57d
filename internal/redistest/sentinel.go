package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a redis-server (no persistence, plus extra arguments) that
// replicates master, waits until its replication link is up, and stops it when
// the test ends.
func StartReplica(t testing.TB, master *Server, extra ...string) *Server {
	t.Helper()
	// The master would wait 5s (repl-diskless-sync-delay) for more replicas
	// before it starts the first sync.
	if err := master.Client(t).ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, extra...)
	s := Start(t, args...)
	if err := AwaitLinkUp(context.Background(), s.Addr(), 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, s.Log())
	}
	return s
}

// AwaitLinkUp waits until the replica at addr reports master_link_status:up.
func AwaitLinkUp(ctx context.Context, addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var info string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		info, _ = c.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // replication state is only visible by asking
	}
	return fmt.Errorf("replica %s: link to its master not up within %v: %s", addr, timeout, info)
}

// SentinelBinary returns the path of redis-sentinel, or an error that says how to
// get it.
func SentinelBinary() (string, error) {
	p, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return "", errors.New("redis-sentinel not found: run `make test`, which installs it, or `apt-get install redis-sentinel`")
	}
	return p, nil
}

// Sentinel is one redis-sentinel process monitoring one master group.
type Sentinel struct {
	Port int
	conf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// SentinelConfig is what a Sentinel monitors, and how fast it fails over.
type SentinelConfig struct {
	MasterName      string        // default "mymaster"
	Master          string        // host:port of the master
	Quorum          int           // default 1
	DownAfter       time.Duration // default 1s
	FailoverTimeout time.Duration // default 3s
}

// StartSentinel starts a redis-sentinel on a free loopback port whose config file
// (which Sentinel rewrites) goes to dir, and waits until it answers. The caller
// stops it.
func StartSentinel(dir string, cfg SentinelConfig) (*Sentinel, error) {
	if cfg.MasterName == "" {
		cfg.MasterName = "mymaster"
	}
	if cfg.Quorum <= 0 {
		cfg.Quorum = 1
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = time.Second
	}
	if cfg.FailoverTimeout <= 0 {
		cfg.FailoverTimeout = 3 * time.Second
	}
	host, port, err := net.SplitHostPort(cfg.Master)
	if err != nil {
		return nil, fmt.Errorf("sentinel master address: %w", err)
	}
	var last error
	for range 5 {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Sentinel{Port: p, conf: filepath.Join(dir, "sentinel-"+strconv.Itoa(p)+".conf")}
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\nsentinel parallel-syncs %s 1\n",
			p, dir, strings.TrimSuffix(s.conf, ".conf")+".log", cfg.MasterName, host, port, cfg.Quorum, cfg.MasterName, cfg.DownAfter.Milliseconds(),
			cfg.MasterName, cfg.FailoverTimeout.Milliseconds(), cfg.MasterName)
		if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

// MustStartSentinel is StartSentinel for a test: the sentinel stops when it ends.
func MustStartSentinel(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	s, err := StartSentinel(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Sentinel) start() error {
	bin, err := SentinelBinary()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, s.conf)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-sentinel: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.out = cmd, exited, out
	s.mu.Unlock()

	return awaitPing("redis-sentinel", s.Addr(), cmd, exited, out)
}

// Addr is host:port.
func (s *Sentinel) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Stop kills the sentinel.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		s.cmd = nil
	}
}

// Log is what the sentinel logged (its logfile, next to its config), for
// failure messages.
func (s *Sentinel) Log() string {
	b, err := os.ReadFile(strings.TrimSuffix(s.conf, ".conf") + ".log")
	if err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.out != nil {
			return s.out.String()
		}
		return ""
	}
	return string(b)
}
