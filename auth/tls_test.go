package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// testCA signs the test's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue returns the PEM certificate and key of a leaf: a server certificate for
// 127.0.0.1, or a client certificate for cn, with uris as URI subject
// alternative names.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, client bool, uris ...string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

// serveTLS serves h over TLS with cfg on a loopback port and returns its URL.
func serveTLS(t *testing.T, cfg *tls.Config, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() { srv.ServeTLS(ln, "", ""); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "https://" + ln.Addr().String()
}

// client returns an HTTP client that trusts ca, presents cert (when given) and
// opens a new connection for every request.
func client(ca *testCA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.pool()}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// servedSerial returns the serial number of the certificate a new connection gets.
func servedSerial(t *testing.T, c *http.Client, url string) int64 {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

func TestTLSRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	c1, k1 := ca.issue(t, 101, "baton-1", false)
	certFile, keyFile := writeFile(t, dir, "tls.crt", c1), writeFile(t, dir, "tls.key", k1)
	var logs syncBuffer
	cfg, err := NewTLSConfig(TLSFiles{CertFile: certFile, KeyFile: keyFile}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want TLS 1.2", cfg.MinVersion)
	}
	url := serveTLS(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	c := client(ca, nil)
	if got := servedSerial(t, c, url); got != 101 {
		t.Fatalf("served serial %d, want 101", got)
	}

	// Rotate: cert-manager and certbot replace both files.
	c2, k2 := ca.issue(t, 102, "baton-2", false)
	writeFile(t, dir, "tls.key", k2)
	writeFile(t, dir, "tls.crt", c2)
	eventually(t, "the rotated certificate", func() bool { return servedSerial(t, c, url) == 102 })

	// A certificate that does not match its key: the last good pair stays.
	c3, _ := ca.issue(t, 103, "baton-3", false)
	writeFile(t, dir, "tls.crt", c3)
	eventually(t, "the logged reload error", func() bool {
		if got := servedSerial(t, c, url); got != 102 {
			t.Fatalf("after a bad pair, served serial %d, want 102", got)
		}
		return strings.Contains(logs.String(), "TLS certificate not reloaded")
	})

	// TLS 1.1 is refused.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool(), MaxVersion: tls.VersionTLS11}}}
	if resp, err := old.Get(url); err == nil {
		resp.Body.Close()
		t.Error("a TLS 1.1 client was served")
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "server CA")
	clientCA := newTestCA(t, "client CA")
	other := newTestCA(t, "another CA")
	sc, sk := ca.issue(t, 1, "baton", false)
	cfg, err := NewTLSConfig(TLSFiles{
		CertFile:     writeFile(t, dir, "tls.crt", sc),
		KeyFile:      writeFile(t, dir, "tls.key", sk),
		ClientCAFile: writeFile(t, dir, "clients.pem", clientCA.pem),
	}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	g, _, _ := keysGuard(t) // worker-1 has cert_cn: worker-1.example
	url := serveTLS(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := g.Authenticate(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, p.Name())
	}))
	pair := func(ca *testCA, cn string) *tls.Certificate {
		c, k := ca.issue(t, 7, cn, true)
		kp, err := tls.X509KeyPair([]byte(c), []byte(k))
		if err != nil {
			t.Fatal(err)
		}
		return &kp
	}
	tests := []struct {
		name     string
		give     *tls.Certificate
		bearer   string
		want     string // the body
		wantFail bool   // the handshake fails
	}{
		{name: "no certificate", wantFail: true},
		{name: "certificate of another CA", give: pair(other, "worker-1.example"), wantFail: true},
		{name: "cert_cn", give: pair(clientCA, "worker-1.example"), want: "worker-1"},
		{name: "unknown CN", give: pair(clientCA, "worker-2.example"), want: "no key"},
		{name: "unknown CN with a key", give: pair(clientCA, "worker-2.example"), bearer: keyB, want: "ops"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if tt.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tt.bearer)
		}
		resp, err := client(ca, tt.give).Do(req)
		if tt.wantFail {
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s: served, want the handshake refused", tt.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: body %q, want %q", tt.name, body, tt.want)
		}
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "CA")
	c, k := ca.issue(t, 1, "x", false)
	cert, key := writeFile(t, dir, "c.pem", c), writeFile(t, dir, "k.pem", k)
	notPEM := writeFile(t, dir, "junk.pem", "not a certificate\n")
	tests := []struct {
		give TLSFiles
		want string
	}{
		{TLSFiles{CertFile: cert}, "needs both"},
		{TLSFiles{KeyFile: key}, "needs both"},
		{TLSFiles{ClientCAFile: cert}, "BATON_TLS_CLIENT_CA_FILE needs"},
		{TLSFiles{CertFile: cert, KeyFile: filepath.Join(dir, "missing")}, "no such file"},
		{TLSFiles{CertFile: key, KeyFile: cert}, "TLS certificate"},
		{TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: notPEM}, "no PEM certificate"},
		{TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: dir + "/none"}, "no such file"},
	}
	for _, tt := range tests {
		_, err := NewTLSConfig(tt.give, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewTLSConfig(%+v) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
	if (TLSFiles{}).Enabled() || !(TLSFiles{CertFile: "x"}).Enabled() {
		t.Error("Enabled is wrong")
	}
	if _, err := NewTLSConfig(TLSFiles{CertFile: cert, KeyFile: key}, zerolog.Nop()); errors.Unwrap(err) != nil {
		t.Error(err)
	}
}

// TLS 1.2 is served only with forward secrecy and authenticated encryption
// (ECDHE with GCM or ChaCha20-Poly1305): a client that offers only a CBC
// suite (with SHA-1 or SHA-256) is refused. TLS 1.3 is served.
func TestTLS12OnlyECDHEWithAEAD(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "test CA")
	c, k := ca.issue(t, 1, "baton", false)
	cfg, err := NewTLSConfig(TLSFiles{CertFile: writeFile(t, dir, "tls.crt", c), KeyFile: writeFile(t, dir, "tls.key", k)}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	url := serveTLS(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tests := []struct {
		suite uint16 // 0: TLS 1.3, Go's default suites
		want  bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
		{0, true},
	}
	for _, tt := range tests {
		cc := &tls.Config{RootCAs: ca.pool(), MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tt.suite}}
		name := tls.CipherSuiteName(tt.suite)
		if tt.suite == 0 {
			cc, name = &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS13}, "TLS 1.3"
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cc}}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		if got := err == nil; got != tt.want {
			t.Errorf("%s: served %v (%v), want %v", name, got, err, tt.want)
		}
	}
}

// A key may name its client certificate by a URI subject alternative name
// (cert_uri: a SPIFFE ID, say) instead of its common name. A certificate that
// maps to two keys (its CN to one, a URI to another) is no one: refused.
func TestClientCertificateBySANURI(t *testing.T) {
	const worker = "spiffe://example.org/ns/jobs/sa/worker"
	path := writeFile(t, t.TempDir(), "keys.yaml", withSums(goodYAML)+`  - name: jobs-worker
    cert_uri: `+worker+`
    allow:
      - names: "jobs:*"
        actions: [lock]
`)
	g, err := NewGuard(Config{File: path, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	clientCA := newTestCA(t, "client CA")
	withCert := func(cn string, verified bool, uris ...string) *http.Request {
		c, _ := clientCA.issue(t, 9, cn, true, uris...)
		block, _ := pem.Decode([]byte(c))
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		r := request("203.0.113.9:4000")
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
		if verified {
			chains, err := leaf.Verify(x509.VerifyOptions{Roots: clientCA.pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			if err != nil {
				t.Fatal(err)
			}
			r.TLS.VerifiedChains = chains
		}
		return r
	}
	tests := []struct {
		name string
		give *http.Request
		want string // the principal, or part of the refusal
	}{
		{"the URI", withCert("anything", true, worker), "jobs-worker"},
		{"the URI among others", withCert("", true, "spiffe://example.org/ns/x/sa/y", worker), "jobs-worker"},
		{"the CN, as before", withCert("worker-1.example", true), "worker-1"},
		{"the CN and the same key's URI", withCert("", true, worker, worker), "jobs-worker"},
		{"an unknown URI", withCert("nobody", true, "spiffe://example.org/ns/x/sa/y"), "no key"},
		{"a URI that only starts like the key's", withCert("nobody", true, worker+"-2"), "no key"},
		{"an unverified certificate", withCert("anything", false, worker), "no key"},
		{"the CN of one key and the URI of another", withCert("worker-1.example", true, worker), "more than one key"},
	}
	for _, tt := range tests {
		p, err := g.Authenticate(tt.give)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = p.Name()
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
