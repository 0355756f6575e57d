package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/batonhq/baton/auth"
)

// binary is the baton command, built once for every test.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "baton")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// baton runs the binary and returns its stdout, stderr and exit status.
func baton(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

var keyLine = regexp.MustCompile(`^bk_[A-Za-z0-9_-]{43}$`)

func TestKeygen(t *testing.T) {
	tests := []struct {
		give      []string
		wantGrant map[string]bool // action on lock name -> allowed
	}{
		{
			give:      []string{"keygen", "billing-web", "--allow", "billing:*=lock,read"},
			wantGrant: map[string]bool{"lock billing:x": true, "read billing:x": true, "lock payroll": false, "admin billing:x": false},
		},
		{
			give:      []string{"keygen", "--allow", "*=admin", "--allow=*=metrics", "ops"},
			wantGrant: map[string]bool{"admin x": true, "lock x": true, "metrics -": true},
		},
		{
			give:      []string{"keygen", "ci"},
			wantGrant: map[string]bool{"lock x": true, "read x": true, "admin x": false, "metrics -": false},
		},
	}
	for _, tt := range tests {
		stdout, stderr, code := baton(t, tt.give...)
		if code != 0 {
			t.Fatalf("baton %q: exit %d\n%s", tt.give, code, stderr)
		}
		key, entry, _ := strings.Cut(stdout, "\n")
		if !keyLine.MatchString(key) {
			t.Fatalf("baton %q: the first line is not a key: %q", tt.give, key)
		}
		if !strings.Contains(stderr, "Store it now") || !strings.Contains(stderr, "shown only this once") {
			t.Errorf("baton %q: stderr does not tell to store the key: %q", tt.give, stderr)
		}
		if strings.Contains(entry, key) || strings.Contains(stderr, key) {
			t.Fatalf("baton %q: the key is printed more than once", tt.give)
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "keys.yaml")
		if err := os.WriteFile(file, []byte("keys:\n"+entry), 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := auth.NewGuard(auth.Config{File: file})
		if err != nil {
			t.Fatalf("baton %q: the entry does not load: %v\n%s", tt.give, err, entry)
		}
		p, err := authenticate(g, key)
		if err != nil {
			t.Fatalf("baton %q: the key does not authenticate: %v", tt.give, err)
		}
		for grant, want := range tt.wantGrant {
			action, name, _ := strings.Cut(grant, " ")
			a, _ := auth.ParseAction(action)
			if got := p.Can(a, name); got != want {
				t.Errorf("baton %q: Can(%s) = %v, want %v", tt.give, grant, got, want)
			}
		}
	}
}

func TestKeygenKeysDiffer(t *testing.T) {
	a, _, _ := baton(t, "keygen", "a")
	b, _, _ := baton(t, "keygen", "a")
	if a == b {
		t.Error("two runs printed the same key")
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		give     []string
		wantCode int
		wantErr  string // in stderr
	}{
		{nil, 2, "usage: baton [--url URL] [--key KEY] COMMAND"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"keygen"}, 2, "give exactly one NAME"},
		{[]string{"keygen", "a", "b"}, 2, "give exactly one NAME"},
		{[]string{"keygen", "Billing"}, 2, `name "Billing" must be 1 to 64 of a-z 0-9 . _ -`},
		{[]string{"keygen", strings.Repeat("a", 65)}, 2, "name (a value of 65 characters, not shown) must be"},
		{[]string{"keygen", "svc", "--allow", "billing:*"}, 2, `--allow: "billing:*" is not GLOB=ACTION,ACTION`},
		{[]string{"keygen", "svc", "--allow", "*=lock,write"}, 2, `unknown action "write"`},
		{[]string{"keygen", "svc", "--allow", "*="}, 2, `unknown action ""`},
		{[]string{"keygen", "svc", "--allow", "billing/*=lock"}, 2, `the glob "billing/*" has "/"`},
		{[]string{"keygen", "svc", "--allow", "..=read"}, 2, `would match only ".."`},
		{[]string{"keygen", "svc", "--allow"}, 2, "flag needs an argument"},
		{[]string{"keygen", "svc", "--bogus"}, 2, "unknown flag: --bogus"},
	}
	for _, tt := range tests {
		stdout, stderr, code := baton(t, tt.give...)
		if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
			t.Errorf("baton %q: exit %d, stderr %q; want %d and %q", tt.give, code, stderr, tt.wantCode, tt.wantErr)
		}
		if stdout != "" {
			t.Errorf("baton %q: printed %q on a usage error (a key?)", tt.give, stdout)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, give := range [][]string{{"--help"}, {"keygen", "--help"}, {"keygen", "-h"}} {
		stdout, _, code := baton(t, give...)
		if code != 0 || !strings.Contains(stdout, "usage: baton") {
			t.Errorf("baton %q: exit %d, stdout %q", give, code, stdout)
		}
	}
}

// authenticate asks g who a request with key is.
func authenticate(g *auth.Guard, key string) (*auth.Principal, error) {
	r := httptest.NewRequest("GET", "/v1/locks/x", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	return g.Authenticate(r)
}
