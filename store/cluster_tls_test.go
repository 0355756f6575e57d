package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// writeClusterCerts writes a CA and a server certificate for 127.0.0.1 and ::1
// signed by it into dir: ca.pem, cert.pem, key.pem.
func writeClusterCerts(t *testing.T, dir string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cluster TLS test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for name, b := range map[string]*pem.Block{
		"ca.pem":   {Type: "CERTIFICATE", Bytes: caDER},
		"cert.pem": {Type: "CERTIFICATE", Bytes: leafDER},
		"key.pem":  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A rediss+cluster:// URL on a real TLS cluster (tls-port only for clients and
// the cluster bus): every shard grants, a waiter is woken over TLS sharded
// pub/sub, WAIT pipelines reach each master over TLS, one pub/sub
// connection per master. The cluster URL takes no options, so the CA must be
// in the system pool: the test runs the store in a child process with
// SSL_CERT_FILE naming the test CA.
func TestTLSClusterGrantsAndWakesOnEveryShard(t *testing.T) {
	if url := os.Getenv("TLS_CLUSTER_URL"); url != "" {
		tlsClusterChild(t, url)
		return
	}
	cli, err := redistest.CLIBinary()
	if err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	writeClusterCerts(t, certs)
	c := &redistest.Cluster{}
	t.Cleanup(c.Stop)
	var seeds []string
	for range 3 {
		port, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := redistest.StartServer(t.TempDir(), "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", filepath.Join(certs, "cert.pem"), "--tls-key-file", filepath.Join(certs, "key.pem"),
			"--tls-ca-cert-file", filepath.Join(certs, "ca.pem"), "--tls-auth-clients", "no",
			"--tls-cluster", "yes", "--tls-replication", "yes",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000")
		if err != nil {
			t.Skipf("redis-server with TLS: %v", err)
		}
		c.Nodes = append(c.Nodes, s)
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(port))
	}
	args := append([]string{"--tls", "--cacert", filepath.Join(certs, "ca.pem"), "--cluster", "create"}, seeds...)
	if out, err := exec.Command(cli, append(args, "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("cluster create: %v: %s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.AwaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTLSClusterGrantsAndWakesOnEveryShard$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TLS_CLUSTER_URL=rediss+cluster://"+strings.Join(seeds, ","),
		"SSL_CERT_FILE="+filepath.Join(certs, "ca.pem"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

func tlsClusterChild(t *testing.T, url string) {
	rdb, err := redisconn.NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	s := store.New(rdb, store.Options{Prefix: "cxtls", Metrics: m, WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := s.Ready(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // readiness is only known by asking
	}
	masters := map[string]bool{}
	for i := 0; len(masters) < 3 && i < 200; i++ {
		name := "n" + strconv.Itoa(i)
		m := s.MasterOf(name)
		if m == "" || masters[m] {
			continue
		}
		masters[m] = true
		first, err := s.Acquire(ctx, store.AcquireRequest{Name: name, TTL: 10 * time.Second})
		if err != nil || first.Lease == nil {
			t.Fatalf("%s on %s: %+v %v", name, m, first, err)
		}
		got := startWaiter(t, s, name, 10*time.Second)
		if _, err := s.Release(ctx, store.Ref{Name: name, ID: first.Lease.ID}); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		if r := <-got; r.Lease == nil {
			t.Fatalf("%s: waiter %+v", name, r)
		}
		if d := time.Since(released); d > time.Second {
			t.Errorf("%s: woken %v after the release", name, d)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("locks on %d masters, want 3", len(masters))
	}
	if n := testutil.ToFloat64(m.PubSubConns); n != 3 {
		t.Errorf("pub/sub connections %v, want 3", n)
	}
}
