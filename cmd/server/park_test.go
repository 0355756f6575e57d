package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns their
// paths.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baton"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Over TLS, HTTP/1.1 long-polls park (the process holds no goroutine for
// them) and are answered on their connection, which is then reused; HTTP/2
// long-polls cannot be taken over, wait as before and are answered alike.
func TestTLSLongPollsParkOrFallBack(t *testing.T) {
	cfg := testConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = selfSigned(t)
	base, _ := startServe(t, cfg)
	base = "https://" + strings.TrimPrefix(base, "http://")
	h1 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	h2 := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	t.Cleanup(h1.CloseIdleConnections)
	t.Cleanup(h2.CloseIdleConnections)
	do := func(c *http.Client, method, path, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	waiters := func() float64 {
		_, body := do(h1, "GET", "/metrics", "")
		sc := bufio.NewScanner(strings.NewReader(body))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "baton_waiters "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return -1
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			c := map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2.0": h2}[proto]
			name := "tls" + strconv.Itoa(len(proto))
			if res, _ := do(c, "POST", "/v1/locks/"+name, `{"ttl_ms": 60000}`); res.StatusCode != http.StatusCreated || res.Proto != proto {
				t.Fatalf("holder: %d %s", res.StatusCode, res.Proto)
			}
			const n = 20
			type answer struct {
				status int
				proto  string
				id     string
				err    error
			}
			answers := make(chan answer, n)
			for i := range n {
				go func() {
					req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/locks/%s?wait_ms=20000", base, name), nil)
					req.Header.Set("X-Request-Id", fmt.Sprint("tls-", i))
					res, err := c.Do(req)
					if err != nil {
						answers <- answer{err: err}
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					answers <- answer{status: res.StatusCode, proto: res.Proto, id: res.Header.Get("X-Request-Id")}
				}()
			}
			waitFor(t, "20 waiters", func() bool { return waiters() == n })
			serving := serverConnGoroutines()
			t.Logf("%s: %d goroutines of net/http serving connections, %d long-polls waiting", proto, serving, n)
			// Those left are the /metrics client's connection's (and, for HTTP/2,
			// the one connection's and its streams' handlers).
			if proto == "HTTP/1.1" && serving > 5 {
				t.Errorf("%d net/http connection goroutines for %d HTTP/1.1 long-polls: they did not park", serving, n)
			}
			if proto == "HTTP/2.0" && serving < n {
				t.Errorf("%d net/http goroutines for %d HTTP/2 long-polls: want them waiting on their handlers'", serving, n)
			}
			if res, _ := do(c, "DELETE", "/v1/locks/"+name+"?force=true", ""); res.StatusCode != http.StatusOK {
				t.Fatalf("force release: %d", res.StatusCode)
			}
			for range n {
				a := <-answers
				if a.err != nil || a.status != http.StatusOK || a.proto != proto || !strings.HasPrefix(a.id, "tls-") {
					t.Errorf("long-poll answer: %+v", a)
				}
			}
			// The connections are kept alive: the next requests reuse them.
			req, _ := http.NewRequest("GET", base+"/v1/locks/"+name, nil)
			reused := false
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
			}))
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if !reused {
				t.Error("no connection of the long-polls was reused")
			}
		})
	}
}

// serverConnGoroutines counts the goroutines in net/http's server connection
// code: the connection's own (conn.serve, HTTP/1.x), and HTTP/2's stream
// handlers.
func serverConnGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.(*conn).serve") || strings.Contains(g, "net/http.(*http2serverConn).runHandler") {
			n++
		}
	}
	return n
}
