package auth

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// The seed corpus in testdata/fuzz holds the malformed headers of issue 9 (no
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
	// The header cases of issue 9, each a 401 with a reason, none a panic.
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
