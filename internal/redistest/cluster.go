package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a real Redis Cluster on loopback: Masters masters, each with
// ReplicasPer replicas, every node a redis-server of its own, made one cluster
// by `redis-cli --cluster create`.
type Cluster struct {
	Nodes []*Server // in the order they were given to redis-cli: masters first
	dir   string
}

// ClusterConfig shapes a cluster; zero values are 3 masters, 1 replica each,
// and a 1 s node timeout (how long a master may be unreachable before its
// replica is promoted).
type ClusterConfig struct {
	Masters, ReplicasPer int
	NodeTimeout          time.Duration
}

// CLIBinary returns the path of redis-cli, or an error that says how to get it.
func CLIBinary() (string, error) {
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", errors.New("redis-cli not found: run `make test`, which installs it, or `apt-get install redis-tools`")
	}
	return p, nil
}

// StartCluster starts a cluster and stops it when the test ends.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	c, err := StartClusterIn(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// MustStartClusterMain is for TestMain: a 3-master, 3-replica cluster in a
// temporary directory, or it prints why not and exits. It is shared by tests
// that kill no node, so its nodes take each other for failed only after
// Redis's default 15 s of silence, not the 1 s of StartCluster's default: on a
// loaded machine a node can be busy for a second, and a failover started by
// that would answer CLUSTERDOWN to whatever test runs then.
func MustStartClusterMain() (*Cluster, func()) {
	dir, err := os.MkdirTemp("", "baton-cluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := StartClusterIn(dir, ClusterConfig{NodeTimeout: 15 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = os.RemoveAll(dir)
		os.Exit(2)
	}
	return c, func() { c.Stop(); _ = os.RemoveAll(dir) }
}

// StartClusterIn starts a cluster whose nodes keep their files under dir; the
// caller stops it. It returns once every node reports cluster_state:ok, knows
// every other node, and every replica's link to its master is up.
func StartClusterIn(dir string, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Masters <= 0 {
		cfg.Masters = 3
	}
	if cfg.ReplicasPer < 0 {
		cfg.ReplicasPer = 0
	} else if cfg.ReplicasPer == 0 && cfg.Masters == 3 {
		cfg.ReplicasPer = 1
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = time.Second
	}
	cli, err := CLIBinary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	n := cfg.Masters * (1 + cfg.ReplicasPer)
	for i := range n {
		nd := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		s, err := StartServer(nd, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cfg.NodeTimeout.Milliseconds(), 10),
			// A replica of a master that is gone is promoted however stale it is:
			// the tests kill masters on purpose.
			"--cluster-replica-validity-factor", "0",
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.ReplicasPer), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.AwaitHealthy(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// AwaitHealthy waits until every running node says cluster_state:ok and knows
// every other running node, and every replica's link is up: the state in which
// a cluster client sees one consistent slot map.
func (c *Cluster) AwaitHealthy(ctx context.Context) error {
	var last string
	for {
		ok := true
		for _, s := range c.Nodes {
			if !s.Running() {
				continue
			}
			if why := s.clusterNotReady(ctx, c.running()); why != "" {
				ok, last = false, s.Addr()+": "+why
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %s", last)
		case <-time.After(20 * time.Millisecond): // cluster state is only visible by asking
		}
	}
}

func (c *Cluster) running() int {
	n := 0
	for _, s := range c.Nodes {
		if s.Running() {
			n++
		}
	}
	return n
}

// clusterNotReady says why the node is not yet a settled member of a cluster of
// want running nodes, or "" when it is.
func (s *Server) clusterNotReady(ctx context.Context, want int) string {
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer cl.Close()
	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err.Error()
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return "cluster_state not ok"
	}
	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err.Error()
	}
	alive := 0
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		if strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") {
			continue
		}
		if f[7] != "connected" && !strings.Contains(f[2], "myself") {
			continue
		}
		alive++
	}
	if alive < want {
		return fmt.Sprintf("knows %d of %d running nodes", alive, want)
	}
	repl, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return err.Error()
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return "replica link not up"
	}
	return ""
}

// Seeds are the nodes' addresses, comma-separated, as a redis+cluster:// URL
// lists them.
func (c *Cluster) Seeds() string {
	addrs := make([]string, 0, len(c.Nodes))
	for _, s := range c.Nodes {
		addrs = append(addrs, s.Addr())
	}
	return strings.Join(addrs, ",")
}

// URL is the redis+cluster:// URL of the cluster, every node a seed.
func (c *Cluster) URL() string { return "redis+cluster://" + c.Seeds() }

// Client returns a cluster client for inspecting the cluster; closed by Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	addrs := make([]string, 0, len(c.Nodes))
	for _, s := range c.Nodes {
		addrs = append(addrs, s.Addr())
	}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// MasterOf returns the node that serves key's slot now, asking a running node.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	slot := Slot(key)
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		slots, err := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if slot >= r.Start && slot <= r.End && len(r.Nodes) > 0 {
				for _, n := range c.Nodes {
					if n.Addr() == r.Nodes[0].Addr {
						return n, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("no node serves slot %d", slot)
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// Running reports whether the server process is up (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Slot is Redis Cluster's hash slot of key (CRC16 of its hash tag, mod 16384).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// MigrateSlot moves a slot, and every key in it, from one master to another
// as redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on
// the source, MIGRATE of the keys, then the slot assigned to the target on
// both (the rest of the cluster learns it by gossip).
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, from, to *Server) error {
	src, dst := from.client(), to.client()
	defer src.Close()
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", "127.0.0.1", to.Port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	for _, cl := range []*redis.Client{dst, src} {
		if err := cl.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err(); err != nil {
			return fmt.Errorf("setslot node: %w", err)
		}
	}
	return nil
}

func (s *Server) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
}
