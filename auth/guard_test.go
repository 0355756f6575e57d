package auth

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// syncBuffer is a log sink that the race detector accepts from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// writeFile writes content to name in dir, atomically (as deploy tools do).
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// keysGuard starts a keys-mode Guard on goodYAML, logging to the returned buffer.
func keysGuard(t *testing.T) (*Guard, string, *syncBuffer) {
	t.Helper()
	path := writeFile(t, t.TempDir(), "keys.yaml", withSums(goodYAML))
	var log syncBuffer
	g, err := NewGuard(Config{File: path, Logger: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	return g, path, &log
}

func request(remote string, auth ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/v1/locks/x", nil)
	r.RemoteAddr = remote
	for _, a := range auth {
		r.Header.Add("Authorization", a)
	}
	return r
}

func TestNewGuardModes(t *testing.T) {
	file := writeFile(t, t.TempDir(), "keys.yaml", "keys: []\n")
	tests := []struct {
		give    Config
		want    Mode
		wantErr string
		wantLog string
	}{
		{give: Config{}, want: ModeProtected, wantLog: "protected mode"},
		{give: Config{Auth: "off"}, want: ModeOff, wantLog: "access control is off"},
		{give: Config{File: file}, want: ModeKeys, wantLog: `"keys":0`},
		{give: Config{File: file, Auth: "off"}, wantErr: "BATON_AUTH_FILE and BATON_AUTH=off are both set"},
		{give: Config{Auth: "no"}, wantErr: `BATON_AUTH="no": the only value is off`},
		{give: Config{File: filepath.Dir(file)}, wantErr: "is a directory"},
	}
	for _, tt := range tests {
		var log syncBuffer
		tt.give.Logger = zerolog.New(&log)
		g, err := NewGuard(tt.give)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewGuard(%+v) = %v, want an error with %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("NewGuard(%+v): %v", tt.give, err)
		}
		if g.Mode() != tt.want || !strings.Contains(log.String(), tt.wantLog) {
			t.Errorf("NewGuard(%+v): mode %v, log %q; want %v and %q", tt.give, g.Mode(), log.String(), tt.want, tt.wantLog)
		}
	}
}

func TestAuthenticateKeys(t *testing.T) {
	g, _, log := keysGuard(t)
	tests := []struct {
		give []string // Authorization values
		want string   // principal, or the error's reason
	}{
		{[]string{"Bearer " + keyA}, "billing-web"},
		{[]string{"bearer " + keyB}, "ops"},
		{[]string{"BEARER   " + keyA}, "billing-web"},
		{nil, "no key"},
		{[]string{keyA}, "must be Bearer"},
		{[]string{"Basic " + keyA}, "must be Bearer"},
		{[]string{"Basic dXNlcjpwYXNz"}, "must be Bearer"},
		{[]string{"Bearer"}, "the Bearer key is empty"},
		{[]string{"Bearer "}, "the Bearer key is empty"},
		{[]string{"Bearer short"}, "32 to 256 visible ASCII"},
		{[]string{"Bearer " + strings.Repeat("k", 10<<10)}, "32 to 256 visible ASCII"},
		{[]string{"Bearer " + keyA[:40] + "é"}, "32 to 256 visible ASCII"},
		{[]string{"Bearer " + keyA[:20] + " " + keyA[20:]}, "32 to 256 visible ASCII"},
		{[]string{"Bearer " + keyA[:30] + "\x00" + keyA[31:]}, "32 to 256 visible ASCII"},
		{[]string{"Bearer " + keyA + "x"}, "the key is not valid"},
		{[]string{"Bearer " + sumA}, "the key is not valid"},
		{[]string{"Bearer " + keyA, "Bearer " + keyB}, "more than one Authorization header"},
	}
	for _, tt := range tests {
		p, err := g.Authenticate(request("203.0.113.9:4000", tt.give...))
		got := ""
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Errorf("Authenticate(%.40q): %v does not match ErrUnauthorized", tt.give, err)
			}
			got = err.Error()
		} else {
			got = p.Name()
		}
		if !strings.Contains(got, tt.want) {
			t.Errorf("Authenticate(%.40q) = %q, want %q", tt.give, got, tt.want)
		}
		if strings.Contains(got, keyA[3:]) || strings.Contains(got, keyB[3:]) {
			t.Errorf("Authenticate(%.40q): the error repeats the key: %q", tt.give, got)
		}
	}
	if strings.Contains(log.String(), keyA) || strings.Contains(log.String(), keyB) {
		t.Errorf("a key is in the log: %s", log)
	}
}

func TestAuthenticateProtected(t *testing.T) {
	g, err := NewGuard(Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string // RemoteAddr
		want bool
	}{
		{"127.0.0.1:5000", true},
		{"127.9.8.7:5000", true},
		{"[::1]:5000", true},
		{"[::ffff:127.0.0.1]:5000", true},
		{"[::1%lo]:5000", true},
		{"10.0.0.1:5000", false},
		{"[::ffff:10.0.0.1]:5000", false},
		{"[2001:db8::1]:5000", false},
		{"0.0.0.0:5000", false},
		{"localhost:5000", false},
		{"127.0.0.1", false},
		{"", false},
	}
	for _, tt := range tests {
		r := request(tt.give)
		r.Host = "localhost:8080"
		if !tt.want { // never trusted: a proxy's word does not make a peer loopback
			r.Header.Set("X-Forwarded-For", "127.0.0.1")
			r.Header.Set("X-Real-Ip", "127.0.0.1")
		}
		p, err := g.Authenticate(r)
		if tt.want && (err != nil || p != Loopback()) {
			t.Errorf("Authenticate(from %q) = %v, %v; want the loopback principal", tt.give, p, err)
		}
		if !tt.want && (!errors.Is(err, ErrNotLoopback) || !errors.Is(err, ErrUnauthorized)) {
			t.Errorf("Authenticate(from %q) = %v, %v; want ErrNotLoopback", tt.give, p, err)
		}
	}
	if !strings.Contains(ErrNotLoopback.Error(), "BATON_AUTH_FILE") || !strings.Contains(ErrNotLoopback.Error(), "BATON_AUTH=off") {
		t.Errorf("ErrNotLoopback does not say how to configure access: %q", ErrNotLoopback)
	}
}

// Protected mode serves a loopback peer only when the request is what a
// program on this host sends: a loopback Host (not a name a DNS-rebinding page
// uses), no header a proxy or sidecar adds, and no Origin or Sec-Fetch-Site of
// a web page elsewhere. Each refusal says what to do instead.
func TestProtectedModeServesOnlyLocalPrograms(t *testing.T) {
	g, err := NewGuard(Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		host    string
		headers map[string]string
		tls     bool
		want    string // "" to be served, else part of the refusal
	}{
		{name: "localhost", host: "localhost:8080"},
		{name: "localhost without port", host: "localhost"},
		{name: "LOCALHOST, fully qualified", host: "LOCALHOST.:8080"},
		{name: "127.0.0.1", host: "127.0.0.1:18092"},
		{name: "127.0.0.1 without port", host: "127.0.0.1"},
		{name: "another loopback address", host: "127.1.2.3:80"},
		{name: "IPv6 loopback", host: "[::1]:8080"},
		{name: "IPv6 loopback without port", host: "[::1]"},
		{name: "mapped IPv4 loopback", host: "[::ffff:127.0.0.1]:8080"},
		{name: "DNS rebinding", host: "rebind.attacker.example:18092", want: "Host must be localhost"},
		{name: "rebinding without port", host: "rebind.attacker.example", want: "Host must be localhost"},
		{name: "a subdomain of localhost", host: "evil.localhost:8080", want: "Host must be localhost"},
		{name: "a name that starts like localhost", host: "localhost.attacker.example", want: "Host must be localhost"},
		{name: "any address", host: "0.0.0.0:8080", want: "Host must be localhost"},
		{name: "a LAN address", host: "192.168.1.5:8080", want: "Host must be localhost"},
		{name: "a zone", host: "[::1%25lo]:8080", want: "Host must be localhost"},
		{name: "a bad port", host: "localhost:80x", want: "Host must be localhost"},
		{name: "IPv6 without brackets", host: "::1", want: "Host must be localhost"},
		{name: "IPv4 in brackets", host: "[127.0.0.1]:8080", want: "Host must be localhost"},
		{name: "localhost in brackets", host: "[localhost]", want: "Host must be localhost"},
		{name: "no Host", host: "", want: "Host must be localhost"},
		{name: "the dashboard's own origin", host: "127.0.0.1:8080", headers: map[string]string{"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}},
		{name: "own origin over TLS", host: "localhost:8443", tls: true, headers: map[string]string{"Origin": "https://localhost:8443"}},
		{name: "a page on another port", host: "127.0.0.1:8080", headers: map[string]string{"Origin": "http://127.0.0.1:3000"}, want: "another origin"},
		{name: "a page elsewhere", host: "127.0.0.1:8080", headers: map[string]string{"Origin": "https://attacker.example"}, want: "another origin"},
		{name: "the http origin over TLS", host: "localhost:8443", tls: true, headers: map[string]string{"Origin": "http://localhost:8443"}, want: "another origin"},
		{name: "an opaque origin", host: "127.0.0.1:8080", headers: map[string]string{"Origin": "null"}, want: "another origin"},
		{name: "an empty origin", host: "127.0.0.1:8080", headers: map[string]string{"Origin": ""}, want: "another origin"},
		{name: "cross-site without Origin", host: "127.0.0.1:8080", headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: "another origin"},
		{name: "cross-site with own origin", host: "127.0.0.1:8080", headers: map[string]string{"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "Cross-Site"}, want: "another origin"},
		{name: "same-site navigation", host: "127.0.0.1:8080", headers: map[string]string{"Sec-Fetch-Site": "same-site"}},
		{name: "X-Forwarded-For", host: "127.0.0.1:8080", headers: map[string]string{"X-Forwarded-For": "203.0.113.7"}, want: "came through a proxy"},
		{name: "X-Forwarded-For naming loopback", host: "127.0.0.1:8080", headers: map[string]string{"X-Forwarded-For": "127.0.0.1"}, want: "came through a proxy"},
		{name: "Forwarded", host: "127.0.0.1:8080", headers: map[string]string{"Forwarded": "for=203.0.113.7"}, want: "came through a proxy"},
		{name: "Via", host: "127.0.0.1:8080", headers: map[string]string{"Via": "1.1 envoy"}, want: "came through a proxy"},
		{name: "X-Real-IP", host: "127.0.0.1:8080", headers: map[string]string{"X-Real-IP": "203.0.113.7"}, want: "came through a proxy"},
		{name: "X-Forwarded-Host", host: "127.0.0.1:8080", headers: map[string]string{"X-Forwarded-Host": "baton.example"}, want: "came through a proxy"},
		{name: "an empty X-Forwarded-For", host: "127.0.0.1:8080", headers: map[string]string{"X-Forwarded-For": ""}, want: "came through a proxy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request("127.0.0.1:40000")
			r.Host = tt.host
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			p, err := g.Authenticate(r)
			switch {
			case tt.want == "" && (err != nil || p != Loopback()):
				t.Errorf("Authenticate = %v, %v; want the loopback principal", p, err)
			case tt.want != "" && (err == nil || !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Authenticate = %v, %v; want a 401 saying %q", p, err, tt.want)
			case tt.want != "" && tt.want != "another origin" && !strings.Contains(err.Error(), "BATON_AUTH_FILE"):
				t.Errorf("the refusal does not say how to serve such clients: %v", err)
			}
		})
	}
}

func TestAuthenticateOff(t *testing.T) {
	g, err := NewGuard(Config{Auth: "off", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Authenticate(request("198.51.100.1:1", "Basic nonsense"))
	if err != nil || p != Anyone() || !p.All() {
		t.Errorf("Authenticate in off mode = %v, %v; want Anyone", p, err)
	}
}

func TestAuthenticateClientCertificate(t *testing.T) {
	g, _, _ := keysGuard(t)
	withCert := func(cn string, verified bool) *http.Request {
		r := request("203.0.113.9:4000")
		leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
		if verified {
			r.TLS.VerifiedChains = [][]*x509.Certificate{{leaf}}
		}
		return r
	}
	tests := []struct {
		give *http.Request
		want string
	}{
		{withCert("worker-1.example", true), "worker-1"},
		{withCert("worker-1.example", false), "no key"},
		{withCert("someone-else", true), "no key"},
		{withCert("billing-web", true), "no key"}, // a key's name is not its cert_cn
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
			t.Errorf("Authenticate(cert %q) = %q, want %q", tt.give.TLS.PeerCertificates[0].Subject.CommonName, got, tt.want)
		}
	}
	// A Bearer header decides when there is one, certificate or not.
	r := withCert("worker-1.example", true)
	r.Header.Set("Authorization", "Bearer "+keyB)
	if p, err := g.Authenticate(r); err != nil || p.Name() != "ops" {
		t.Errorf("Authenticate(cert and key) = %v, %v; want the key's principal", p, err)
	}
	r.Header.Set("Authorization", "Basic x")
	if _, err := g.Authenticate(r); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Authenticate(cert and a bad header) = %v; want ErrUnauthorized", err)
	}
}

func TestLookup(t *testing.T) {
	g, _, _ := keysGuard(t)
	if p := g.Lookup("ops"); p == nil || p.ID() != PrincipalID("ops") {
		t.Errorf("Lookup(ops) = %v", p)
	}
	if p := g.Lookup("nobody"); p != nil {
		t.Errorf("Lookup(nobody) = %v, want nil", p)
	}
}
