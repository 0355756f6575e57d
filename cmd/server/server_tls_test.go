package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// TLS as the built server runs it, configured only through its environment
// (BATON_TLS_*, BATON_AUTH_FILE): HTTPS with a test CA made here, a certificate
// rotated on disk, and client certificates.

// testCA signs the certificates of one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue returns a PEM certificate and key signed by ca: a server certificate
// for 127.0.0.1, or (client) a client certificate whose common name is cn.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// clientPair is a client certificate of ca for cn, ready for a tls.Config.
func (ca *testCA) clientPair(t *testing.T, cn string) *tls.Certificate {
	t.Helper()
	c, k := ca.issue(t, 7, cn, true)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// tlsClient trusts ca, presents cert when given, and opens a new connection
// (a new handshake) for every request.
func tlsClient(ca *testCA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

func writeTestFile(t *testing.T, path string, data []byte) string {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProc runs the built server with env on a free loopback port against a
// redis-server of its own and returns the process and its address, once it
// logs that it listens. Cleanup stops it.
func startProc(t *testing.T, env ...string) (*proc, string) {
	t.Helper()
	rs := redistest.Start(t)
	cmd := exec.Command(batonBinary(t))
	cmd.Env = append(os.Environ(), "BATON_ADDR=127.0.0.1:0", "BATON_REDIS_URL="+rs.URL(),
		"BATON_SHUTDOWN_DELAY=0s", "BATON_SHUTDOWN_TIMEOUT=8s", "BATON_LOG_FORMAT=json", "BATON_LOG_LEVEL=info")
	cmd.Env = append(cmd.Env, env...)
	p := &proc{name: "baton", cmd: cmd, logs: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("server log:\n%s", p.logs)
		}
	})
	var addr string
	waitFor(t, "the server listening", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("the server exited:\n%s", p.logs)
		default:
		}
		addr = strings.TrimPrefix(listeningAddr(p.logs.String()), "http://")
		return addr != ""
	})
	return p, addr
}

// do sends a request with c and returns its status and body; err is the
// transport's (a refused handshake).
func do(c *http.Client, method, url, bearer, body string) (int, string, *tls.ConnectionState, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, string(raw), res.TLS, err
}

// The server serves HTTPS from BATON_TLS_CERT_FILE and BATON_TLS_KEY_FILE, a lock
// is taken over it, and a certificate rotated on disk is what the next new
// connection gets, without a restart (a handshake looks at the files at most once
// a second: auth.NewTLSConfig).
func TestServerTLSAndRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "baton test CA")
	c1, k1 := ca.issue(t, 101, "baton-1", false)
	certFile := writeTestFile(t, filepath.Join(dir, "tls.crt"), c1)
	keyFile := writeTestFile(t, filepath.Join(dir, "tls.key"), k1)
	p, addr := startProc(t, "BATON_TLS_CERT_FILE="+certFile, "BATON_TLS_KEY_FILE="+keyFile)
	base := "https://" + addr
	c := tlsClient(ca, nil)

	waitFor(t, "readyz 200 over TLS", func() bool {
		st, _, _, err := do(c, "GET", base+"/readyz", "", "")
		return err == nil && st == http.StatusOK
	})
	if !strings.Contains(p.logs.String(), `"tls":true`) {
		t.Errorf(`no "tls":true in the listening line`)
	}
	st, body, cs, err := do(c, "POST", base+"/v1/locks/tls-lock", "", `{"ttl_ms": 60000}`)
	if err != nil || st != http.StatusCreated {
		t.Fatalf("POST a lock over TLS: %d %s %v", st, body, err)
	}
	if cs == nil || cs.Version < tls.VersionTLS12 || cs.PeerCertificates[0].SerialNumber.Int64() != 101 {
		t.Fatalf("TLS state %+v, want TLS 1.2+ with certificate 101", cs)
	}
	var lease struct{ URL string }
	if err := json.Unmarshal([]byte(body), &lease); err != nil || lease.URL == "" {
		t.Fatalf("lease %s: %v", body, err)
	}
	// Plain HTTP on the TLS port is not served.
	if res, err := http.Get("http://" + addr + "/readyz"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("plain HTTP served 200 on the TLS port")
		}
	}

	// Rotate as cert-manager and certbot do: both files replaced, the key first.
	c2, k2 := ca.issue(t, 102, "baton-2", false)
	writeTestFile(t, keyFile, k2)
	writeTestFile(t, certFile, c2)
	rotated := time.Now()
	var served int64
	deadline := rotated.Add(5 * time.Second) // the 1 s check interval, with room for a loaded machine
	for served != 102 {
		if time.Now().After(deadline) {
			t.Fatalf("new connections still get certificate %d 5 s after the rotation, want 102", served)
		}
		_, _, cs, err := do(c, "GET", base+"/livez", "", "")
		if err != nil {
			t.Fatalf("a new connection during the rotation: %v", err)
		}
		served = cs.PeerCertificates[0].SerialNumber.Int64()
	}
	t.Logf("the rotated certificate was served %v after the files changed", time.Since(rotated).Round(time.Millisecond))
	// The same server process, with what it held: the lease is still there.
	if st, body, _, err := do(c, "DELETE", base+lease.URL, "", ""); err != nil || st != http.StatusOK {
		t.Fatalf("release after the rotation: %d %s %v", st, body, err)
	}
}

// With BATON_TLS_CLIENT_CA_FILE a client without a certificate (or with one of
// another CA) is refused at the handshake, and one whose certificate's CN is a
// key's cert_cn acts as that key without a Bearer header.
func TestServerMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := newTestCA(t, "server CA"), newTestCA(t, "client CA"), newTestCA(t, "another CA")
	sc, sk := serverCA.issue(t, 1, "baton", false)
	keys := writeTestFile(t, filepath.Join(dir, "keys.yaml"), []byte(`keys:
  - name: worker-1
    cert_cn: worker-1.example
    allow:
      - names: "jobs:*"
        actions: [lock, read]
`))
	_, addr := startProc(t,
		"BATON_TLS_CERT_FILE="+writeTestFile(t, filepath.Join(dir, "tls.crt"), sc),
		"BATON_TLS_KEY_FILE="+writeTestFile(t, filepath.Join(dir, "tls.key"), sk),
		"BATON_TLS_CLIENT_CA_FILE="+writeTestFile(t, filepath.Join(dir, "clients.pem"), clientCA.pem),
		"BATON_AUTH_FILE="+keys)
	base := "https://" + addr
	worker := tlsClient(serverCA, clientCA.clientPair(t, "worker-1.example"))
	waitFor(t, "readyz 200 over mTLS", func() bool {
		st, _, _, err := do(worker, "GET", base+"/readyz", "", "")
		return err == nil && st == http.StatusOK
	})

	for name, c := range map[string]*http.Client{
		"no certificate":              tlsClient(serverCA, nil),
		"a certificate of another CA": tlsClient(serverCA, otherCA.clientPair(t, "worker-1.example")),
	} {
		if st, body, _, err := do(c, "POST", base+"/v1/locks/jobs:a", "", "{}"); err == nil {
			t.Errorf("%s: served %d %s, want the handshake refused", name, st, body)
		}
	}

	st, body, _, err := do(worker, "POST", base+"/v1/locks/jobs:a", "", "{}")
	if err != nil || st != http.StatusCreated {
		t.Fatalf("cert_cn worker-1.example: POST jobs:a: %d %s %v, want 201", st, body, err)
	}
	// Authorized as worker-1, within its grants only.
	if st, body, _, err := do(worker, "POST", base+"/v1/locks/other:a", "", "{}"); err != nil || st != http.StatusForbidden {
		t.Errorf("cert_cn worker-1.example: POST other:a: %d %s %v, want 403", st, body, err)
	}
	// A verified certificate whose CN is no key's is not authorized.
	stranger := tlsClient(serverCA, clientCA.clientPair(t, "worker-2.example"))
	if st, body, _, err := do(stranger, "POST", base+"/v1/locks/jobs:b", "", "{}"); err != nil || st != http.StatusUnauthorized {
		t.Errorf("cert CN worker-2.example: POST jobs:b: %d %s %v, want 401", st, body, err)
	}
}

// Parked long-polls over TLS, on a live server.
func TestParkedLongPollsOverTLS(t *testing.T) {
	cfg := testConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = selfSigned(t)
	base, _ := startServe(t, cfg)
	host := strings.TrimPrefix(base, "http://")
	base = "https://" + host
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(cl.CloseIdleConnections)
	hold := func(name string) string {
		t.Helper()
		res, err := cl.Post(base+"/v1/locks/"+name, "application/json", strings.NewReader(`{"ttl_ms":30000}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var l struct{ URL string }
		_ = json.NewDecoder(res.Body).Decode(&l)
		if res.StatusCode != 201 {
			t.Fatalf("hold %s: %d", name, res.StatusCode)
		}
		return l.URL
	}
	release := func(url string) {
		t.Helper()
		req, _ := http.NewRequest("DELETE", base+url, nil)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	waiters := func() float64 {
		res, err := cl.Get(base + "/metrics")
		if err != nil {
			return -1
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "baton_waiters "); ok {
				var f float64
				fmt.Sscan(v, &f)
				return f
			}
		}
		return -1
	}
	await := func(n float64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%v waiters", n), func() bool { return waiters() == n })
	}
	dial := func() *tls.Conn {
		t.Helper()
		c, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		return c
	}
	post := func(name string) string {
		body := `{"wait_ms":10000}`
		return fmt.Sprintf("POST /v1/locks/%s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", name, len(body), body)
	}

	t.Run("close_notify hang-up", func(t *testing.T) {
		url := hold("t1")
		c := dial()
		io.WriteString(c, post("t1"))
		await(1)
		c.Close() // close_notify, then FIN
		await(0)
		release(url)
		res, err := cl.Get(base + "/v1/locks/t1")
		if err != nil {
			t.Fatal(err)
		}
		var st struct{ Held bool }
		json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if st.Held {
			t.Errorf("a TLS waiter that hung up was granted the lock")
		}
	})
	t.Run("pipelined record behind parked", func(t *testing.T) {
		url := hold("t2")
		c := dial()
		io.WriteString(c, post("t2"))
		await(1)
		time.Sleep(50 * time.Millisecond)
		io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
		time.Sleep(50 * time.Millisecond)
		release(url)
		br := bufio.NewReader(c)
		for i, want := range []int{201, 200} {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			io.Copy(io.Discard, res.Body)
			if res.StatusCode != want {
				t.Errorf("answer %d: %d, want %d", i, res.StatusCode, want)
			}
		}
	})
	t.Run("next request after parked answer", func(t *testing.T) {
		url := hold("t3")
		c := dial()
		io.WriteString(c, post("t3"))
		await(1)
		release(url)
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("parked answer: %v %v", res, err)
		}
		io.Copy(io.Discard, res.Body)
		time.Sleep(100 * time.Millisecond) // idle in the lot
		io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
		res, err = http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("next request: %v %v", res, err)
		}
	})
}
