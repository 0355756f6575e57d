package auth

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The seed corpus in testdata/fuzz holds the malformed Authorization headers (no
// scheme, Basic, an empty token, a 10 KB token, non-ASCII) and keys files of
// both formats; `go test` runs every seed, `go test -fuzz` explores from them.

func FuzzBearer(f *testing.F) {
	f.Add("Bearer " + keyA)
	f.Add("Basic dXNlcjpwYXNz")
	f.Add("Bearer ")
	g, err := NewGuard(Config{File: writeFile(f, f.TempDir(), "keys.yaml", withSums(goodYAML))})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := bearerToken([]string{header})
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("bearerToken(%q) = %v, not an ErrUnauthorized", header, err)
			}
		} else {
			if len(key) < minKeyLen || len(key) > maxKeyLen || !keyLike(key) || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
				t.Fatalf("bearerToken(%q) accepted %q", header, key)
			}
			if !strings.HasSuffix(header, key) || !strings.EqualFold(header[:7], "bearer ") {
				t.Fatalf("bearerToken(%q) = %q: not the header's Bearer token", header, key)
			}
		}
		r := request("192.0.2.1:1")
		r.Header["Authorization"] = []string{header}
		p, err := g.Authenticate(r)
		switch {
		case err != nil && strings.Contains(err.Error(), header) && len(header) >= minKeyLen:
			t.Fatalf("the error repeats the header: %v", err)
		case err == nil && key != keyA && key != keyB:
			t.Fatalf("Authenticate(%q) = %s without a known key", header, p.Name())
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	f.Add([]byte(withSums(goodYAML)), false)
	f.Add([]byte(withSums(goodJSON)), true)
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		file := "k.yaml"
		if isJSON {
			file = "k.json"
		}
		keys, err := ParseKeys(file, data)
		if err != nil {
			checkNoKeyInError(t, data, err)
			return
		}
		names, sums := map[string]bool{}, map[string]bool{}
		for _, k := range keys {
			creds := 0
			for _, c := range []string{k.SHA256, k.CertCN, k.CertURI} {
				if c != "" {
					creds++
				}
			}
			if !validKeyName(k.Name) || names[k.Name] || len(k.Allow) == 0 || creds != 1 {
				t.Fatalf("accepted an invalid key: %+v", k)
			}
			if k.SHA256 != "" && (sums[k.SHA256] || !isHex64(k.SHA256) || strings.ToLower(k.SHA256) != k.SHA256) {
				t.Fatalf("accepted a bad or repeated sha256 in %+v", k)
			}
			names[k.Name], sums[k.SHA256] = true, true
			for _, g := range k.Allow {
				if g.set == 0 || len(g.Names.segs) == 0 {
					t.Fatalf("accepted an empty grant in %+v", k)
				}
			}
		}
	})
}

// checkNoKeyInError fails when an error message repeats 32 visible characters
// in a row from the input (what could be a key), unless they could all be part
// of a key's name, which messages do show.
func checkNoKeyInError(t *testing.T, data []byte, err error) {
	t.Helper()
	for _, e := range unjoin(err) {
		var fe *FileError
		if !errors.As(e, &fe) {
			t.Fatalf("not a *FileError: %v", e)
		}
		for _, run := range strings.FieldsFunc(string(data), func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			for i := 0; i+minKeyLen <= len(run); i++ {
				if w := run[i : i+minKeyLen]; strings.Contains(fe.Msg, w) && !nameChars(w) {
					t.Fatalf("the message repeats %q from the input: %s", w, fe.Msg)
				}
			}
		}
	}
}

func nameChars(s string) bool {
	return validKeyName(s)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestBearerSeedsAreRefused(t *testing.T) {
	// The malformed header cases, each a 401 with a reason, none a panic.
	for _, give := range []string{
		keyA, "Basic " + keyA, "Bearer", "Bearer ", "Bearer " + strings.Repeat("k", 10<<10),
		"Bearer " + strings.Repeat("é", 20), "Bearer\t" + keyA, "Token " + keyA, "",
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.Header["Authorization"] = []string{give}
		if _, err := bearerToken(r.Header.Values("Authorization")); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("bearerToken(%.30q) = %v, want ErrUnauthorized", give, err)
		}
	}
}

// FuzzProtectedMode sends protected mode a request from a loopback peer with
// a fuzzed Host, Origin, Sec-Fetch-Site and one more header (a proxy's or
// another), over TLS or not. It is served exactly when a second reading of the
// rules (net/url and net instead of the server's parser) says so: a loopback
// Host, no header a proxy adds, no Origin but the server's own, no
// Sec-Fetch-Site: cross-site. A refusal is one of the fixed 401s, which
// repeat nothing of the request.
func FuzzProtectedMode(f *testing.F) {
	for _, s := range []struct{ host, origin, site, header, value string }{
		{"localhost:8080", "", "", "", ""},
		{"127.0.0.1", "", "", "Accept", "*/*"},
		{"[::1]:8080", "http://[::1]:8080", "same-origin", "", ""},
		{"LOCALHOST.", "", "none", "", ""},
		{"rebind.attacker.example:8080", "", "", "", ""},
		{"localhost.attacker.example", "", "", "", ""},
		{"evil.localhost", "", "", "", ""},
		{"[::ffff:127.0.0.1]:1", "", "", "", ""},
		{"[::1%25lo]", "", "", "", ""},
		{"::1", "", "", "", ""},
		{"127.0.0.1:99999x", "", "", "", ""},
		{"0.0.0.0", "", "", "", ""},
		{"localhost:8080", "http://localhost:3000", "same-site", "", ""},
		{"localhost:8080", "null", "", "", ""},
		{"localhost:8080", "", "cross-site", "", ""},
		{"localhost:8080", "", "", "X-Forwarded-For", "127.0.0.1"},
		{"localhost:8080", "", "", "Forwarded", "for=127.0.0.1"},
		{"localhost:8080", "", "", "Via", "1.1 envoy"},
		{"localhost:8080", "", "", "X-Real-Ip", ""},
		{"localhost:8080", "", "", "X-Forwarded-Host", "baton"},
	} {
		f.Add(s.host, s.origin, s.site, s.header, s.value, false)
	}
	g, err := NewGuard(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, origin, site, header, value string, overTLS bool) {
		r := request("127.0.0.1:40000")
		r.Host = host
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if site != "" {
			r.Header.Set("Sec-Fetch-Site", site)
		}
		if header != "" {
			r.Header[http.CanonicalHeaderKey(header)] = []string{value}
		}
		scheme := "http://"
		if overTLS {
			r.TLS, scheme = &tls.ConnectionState{}, "https://"
		}
		proxied := false
		for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Via"} {
			_, has := r.Header[h]
			proxied = proxied || has
		}
		origins := r.Header["Origin"]
		ownOrigin := len(origins) == 0 || len(origins) == 1 && strings.EqualFold(origins[0], scheme+host)
		crossSite := strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site")
		want := !proxied && loopbackByURL(host) && ownOrigin && !crossSite
		p, err := g.Authenticate(r)
		switch {
		case want && (err != nil || p != Loopback()):
			t.Fatalf("Host %q Origin %q Sec-Fetch-Site %q %s: %q: refused (%v), want served", host, origin, site, header, value, err)
		case !want && err == nil:
			t.Fatalf("Host %q Origin %q Sec-Fetch-Site %q %s: %q: served, want refused", host, origin, site, header, value)
		case err != nil && err != errProxied && err != errHost && err != errOrigin:
			t.Fatalf("Host %q: refusal %v, want one of protected mode's fixed 401s (none repeats a header)", host, err)
		}
	})
}

// loopbackByURL is the Host rule read with net/url and net: localhost or a
// loopback IP, bracketed when IPv6, with an optional port of at most 5 digits.
func loopbackByURL(host string) bool {
	if host == "" || strings.ContainsAny(host, "/?#@\\\\ \t") {
		return false
	}
	u, err := url.Parse("http://" + host)
	if err != nil || u.Host != host {
		return false
	}
	if port := u.Port(); len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return false
	}
	name := u.Hostname()
	if strings.Contains(name, "%") {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(name, "."), "localhost") {
		return true
	}
	if strings.Contains(name, ":") && !strings.HasPrefix(host, "[") {
		return false
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}
