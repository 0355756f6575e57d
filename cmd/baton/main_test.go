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
	"strconv"
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

// baton keys check says whether the server would load a keys file: a good one
// lists its keys (never a key); a bad one prints every error with its line
// and exits 1; so does one that others could write, with how to fix it.
func TestKeysCheck(t *testing.T) {
	dir := t.TempDir()
	key, entry, _ := strings.Cut(must(baton(t, "keygen", "billing-web", "--allow", "billing:*=lock,read")), "\n")
	good := filepath.Join(dir, "good.yaml")
	write := func(path, content string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(good, "keys:\n"+entry+"    rate_per_s: 50\n", 0o600)
	stdout, stderr, code := baton(t, "keys", "check", good)
	if code != 0 || !strings.Contains(stdout, "1 keys, good") || !strings.Contains(stdout, "billing-web") ||
		!strings.Contains(stdout, "billing:*=lock,read") || !strings.Contains(stdout, "rate_per_s 50") {
		t.Errorf("a good file: exit %d\n%s%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, key) {
		t.Error("the key is printed")
	}

	bad := filepath.Join(dir, "bad.yaml")
	write(bad, "keys:\n"+strings.Replace(entry, "[lock, read]", "[lock, reed]", 1)+"  - name: Other\n", 0o600)
	stdout, stderr, code = baton(t, "keys", "check", bad)
	if code != 1 || !strings.Contains(stderr, `bad.yaml:6: key "billing-web": allow[0]: unknown action "reed"`) ||
		!strings.Contains(stderr, "bad.yaml:7:") || !strings.Contains(stderr, "would be refused") || stdout != "" {
		t.Errorf("a bad file: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}

	open := filepath.Join(dir, "open.yaml")
	write(open, "keys:\n"+entry, 0o666)
	if _, stderr, code := baton(t, "keys", "check", open); code != 1 || !strings.Contains(stderr, "mode 0666") || !strings.Contains(stderr, "chmod go-w") {
		t.Errorf("a 0666 file: exit %d\n%s", code, stderr)
	}
	other := strconv.Itoa(os.Geteuid() + 1)
	if os.Geteuid() == 0 {
		if err := os.Chown(good, 4242, -1); err != nil {
			t.Fatal(err)
		}
		other = "0"
	}
	if _, stderr, code := baton(t, "keys", "check", "--uid", other, good); code != 1 || !strings.Contains(stderr, "is owned by uid") {
		t.Errorf("a file owned by someone else than --uid %s: exit %d\n%s", other, code, stderr)
	}
	if _, stderr, code := baton(t, "keys", "check", filepath.Join(dir, "missing.yaml")); code != 1 || !strings.Contains(stderr, "no such file") {
		t.Errorf("a missing file: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := baton(t, "keys", "check"); code != 2 || !strings.Contains(stderr, "usage: baton keys check") {
		t.Errorf("no FILE: exit %d\n%s", code, stderr)
	}
}

func must(stdout, _ string, code int) string {
	if code != 0 {
		panic(fmt.Sprintf("exit %d", code))
	}
	return stdout
}
