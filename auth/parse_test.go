package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hashes of made-up keys; no test key is ever used anywhere else.
var (
	keyA = "bk_test-key-a-0000000000000000000000000000000"
	keyB = "bk_test-key-b-0000000000000000000000000000000"
	sumA = KeySHA256(keyA)
	sumB = KeySHA256(keyB)
)

const goodYAML = `# two keys
keys:
  - name: billing-web
    sha256: SUM_A
    allow:
      - names: "billing:*"
        actions: [lock, read]
    rate_per_s: 200
    max_waiters: 100
    max_holds: 500
    max_tickets: 50
    max_sessions: 5
  - name: ops
    sha256: SUM_B
    allow:
      - names: "*"
        actions: [admin, metrics]
  - name: worker-1
    cert_cn: worker-1.example
    allow:
      - names: "jobs:?"
        actions: [lock]
`

const goodJSON = `{
	"keys": [
		{"name": "billing-web", "sha256": "SUM_A",
		 "allow": [{"names": "billing:*", "actions": ["lock", "read"]}],
		 "rate_per_s": 200, "max_waiters": 100, "max_holds": 500, "max_tickets": 50, "max_sessions": 5},
		{"name": "ops", "sha256": "SUM_B",
		 "allow": [{"names": "*", "actions": ["admin", "metrics"]}]},
		{"name": "worker-1", "cert_cn": "worker-1.example",
		 "allow": [{"names": "jobs:?", "actions": ["lock"]}]}
	]
}`

func withSums(s string) string {
	return strings.NewReplacer("SUM_A", sumA, "SUM_B", sumB).Replace(s)
}

func TestParseKeysGood(t *testing.T) {
	for _, give := range []struct{ file, data string }{
		{"keys.yaml", goodYAML},
		{"keys.json", goodJSON},
		{"upper.yaml", strings.ToUpper(sumA[:0]) + strings.Replace(goodYAML, "SUM_A", strings.ToUpper(sumA), 1)},
	} {
		keys, err := ParseKeys(give.file, []byte(withSums(give.data)))
		if err != nil {
			t.Fatalf("ParseKeys(%s): %v", give.file, err)
		}
		if len(keys) != 3 {
			t.Fatalf("ParseKeys(%s) = %d keys, want 3", give.file, len(keys))
		}
		b, o, w := keys[0], keys[1], keys[2]
		if b.Name != "billing-web" || b.SHA256 != sumA || b.RatePerS != 200 || b.MaxWaiters != 100 || b.Line < 3 ||
			b.MaxHolds != 500 || b.MaxTickets != 50 || b.MaxSessions != 5 {
			t.Errorf("%s: first key = %+v", give.file, b)
		}
		if o.SHA256 != sumB || o.RatePerS != 0 || o.MaxWaiters != 0 || o.MaxHolds != 0 || o.MaxTickets != 0 || o.MaxSessions != 0 {
			t.Errorf("%s: second key = %+v", give.file, o)
		}
		if got := o.Allow[0].Actions(); len(got) != 4 {
			t.Errorf("%s: admin, metrics = %v, want lock, read, admin, metrics", give.file, got)
		}
		if w.CertCN != "worker-1.example" || w.SHA256 != "" {
			t.Errorf("%s: third key = %+v", give.file, w)
		}
	}
}

func TestParseKeysEmptyList(t *testing.T) {
	keys, err := ParseKeys("k.yaml", []byte("keys: []\n"))
	if err != nil || len(keys) != 0 {
		t.Fatalf("ParseKeys(keys: []) = %v, %v; want no keys and no error", keys, err)
	}
}

// yamlEntry is a valid YAML key entry at line 2 of its file, to break one field at a time.
func yamlEntry(lines ...string) string {
	return "keys:\n  - name: svc\n" + strings.Join(lines, "\n") + "\n"
}

const allowAll = "    allow:\n      - names: \"*\"\n        actions: [lock]"

func TestParseKeysErrors(t *testing.T) {
	sha := "    sha256: " + sumA
	tests := []struct {
		give string // YAML, or JSON when it starts with '{'
		want string // in the error, the file and line included
	}{
		{"", "k.yaml: the file is empty"},
		{"  \n\t\n", "k.yaml: the file is empty"},
		{"# nothing\n", "no keys: list"},
		{"keys: [\n", "k.yaml:1: invalid YAML"},
		{"other: 1\n", "k.yaml:1: the file: unknown field \"other\""},
		{"{}", "no keys: list"},
		{"keys: 3\n", "k.yaml:1: keys must be a list"},
		{"keys:\n", "k.yaml:1: keys must be a list"},
		{"- a\n", "k.yaml:1: the file must be a mapping"},
		{"keys: []\n---\nkeys: []\n", "k.yaml:2: a second YAML document"},
		{"keys:\n  - 3\n", "k.yaml:2: keys[0] must be a mapping"},
		{yamlEntry(sha), "k.yaml:2: key \"svc\" has no allow list"},
		{yamlEntry(sha, "    allow: []"), "k.yaml:4: key \"svc\": allow is empty"},
		{yamlEntry(sha, "    allow:\n      - names: \"*\""), "k.yaml:5: key \"svc\": allow[0] has no actions"},
		{yamlEntry(sha, "    allow:\n      - names: \"*\"\n        actions: []"), "k.yaml:6: key \"svc\": allow[0]: actions is empty"},
		{yamlEntry(sha, "    allow:\n      - names: \"*\"\n        actions: lock"), "k.yaml:6: key \"svc\": allow[0]: actions must be a list"},
		{yamlEntry(sha, "    allow:\n      - names: \"*\"\n        actions: [lock, write]"), "k.yaml:6: key \"svc\": allow[0]: unknown action \"write\""},
		{yamlEntry(sha, "    allow:\n      - actions: [lock]"), "k.yaml:5: key \"svc\": allow[0] has no names"},
		{yamlEntry(sha, "    allow:\n      - names: [a, b]\n        actions: [lock]"), "k.yaml:5: key \"svc\": allow[0]: names is one glob, not a list"},
		{yamlEntry(sha, "    allow:\n      - names: \"a/*\"\n        actions: [lock]"), "k.yaml:5: key \"svc\": allow[0]: the glob \"a/*\" has \"/\""},
		{yamlEntry(sha, "    allow:\n      - names: \"..\"\n        actions: [lock]"), "k.yaml:5: key \"svc\": allow[0]: the glob \"..\" would match only"},
		{yamlEntry(sha, "    allow:\n      - names: \"\"\n        actions: [lock]"), "k.yaml:5: key \"svc\": allow[0]: the glob is empty"},
		{yamlEntry(sha, "    allow:\n      - names: \"*\"\n        actions: [lock]\n        ttl: 3"), "k.yaml:7: key \"svc\": allow[0]: unknown field \"ttl\""},
		{yamlEntry(allowAll), "k.yaml:2: key \"svc\" has none of sha256, cert_cn and cert_uri: give exactly one"},
		{yamlEntry(sha, "    cert_cn: x", allowAll), "k.yaml:4: key \"svc\" has both sha256 and cert_cn"},
		{yamlEntry("    cert_uri: spiffe://a/b", "    cert_cn: x", allowAll), "key \"svc\" has both cert_cn and cert_uri"},
		{yamlEntry("    cert_uri: worker-1", allowAll), "k.yaml:3: key \"svc\": cert_uri must be an absolute URI"},
		{yamlEntry("    cert_uri: \"spiffe://a/b c\"", allowAll), "k.yaml:3: key \"svc\": cert_uri must be an absolute URI"},
		{yamlEntry("    cert_uri: \"%zz://x\"", allowAll), "k.yaml:3: key \"svc\": cert_uri must be an absolute URI"},
		{yamlEntry("    cert_uri: spiffe://a/b", allowAll) + "  - name: two\n    cert_uri: spiffe://a/b\n" + allowAll + "\n",
			"k.yaml:7: key \"two\": cert_uri \"spiffe://a/b\" is already key \"svc\"'s at line 2"},
		{yamlEntry("    sha256: abc", allowAll), "k.yaml:3: key \"svc\": sha256 must be 64 hex characters, the SHA-256 of the key (this one has 3)"},
		{yamlEntry("    sha256: "+strings.Repeat("g", 64), allowAll), "k.yaml:3: key \"svc\": sha256 must be 64 hex characters, the SHA-256 of the key (this one has characters other than"},
		{yamlEntry("    sha256: "+keyA, allowAll), "k.yaml:3: key \"svc\": sha256 must be 64 hex characters, the SHA-256 of the key (this looks like the key itself"},
		{yamlEntry("    sha256: [a]", allowAll), "k.yaml:3: key \"svc\": sha256 must be a string"},
		{yamlEntry("    cert_cn: \"\"", allowAll), "k.yaml:3: key \"svc\": cert_cn must be"},
		{yamlEntry(sha, allowAll, "    shaa256: x"), "k.yaml:7: key \"svc\": unknown field \"shaa256\""},
		{yamlEntry(sha, allowAll, "    sha256: "+sumB), "k.yaml:7: key \"svc\": field \"sha256\" is repeated (first at line 3)"},
		{yamlEntry(sha, allowAll, "    rate_per_s: 0"), "k.yaml:7: key \"svc\": rate_per_s must be above 0"},
		{yamlEntry(sha, allowAll, "    rate_per_s: -1"), "k.yaml:7: key \"svc\": rate_per_s must be above 0"},
		{yamlEntry(sha, allowAll, "    rate_per_s: .inf"), "k.yaml:7: key \"svc\": rate_per_s must be above 0"},
		{yamlEntry(sha, allowAll, "    rate_per_s: fast"), "k.yaml:7: key \"svc\": rate_per_s must be a number"},
		{yamlEntry(sha, allowAll, "    max_waiters: 0"), "k.yaml:7: key \"svc\": max_waiters must be at least 1"},
		{yamlEntry(sha, allowAll, "    max_waiters: 1.5"), "k.yaml:7: key \"svc\": max_waiters must be a whole number"},
		{yamlEntry(sha, allowAll, "    max_holds: 0"), "k.yaml:7: key \"svc\": max_holds must be at least 1 and at most 1000000000 (leave it out for the server's default)"},
		{yamlEntry(sha, allowAll, "    max_holds: many"), "k.yaml:7: key \"svc\": max_holds must be a whole number"},
		{yamlEntry(sha, allowAll, "    max_tickets: -3"), "k.yaml:7: key \"svc\": max_tickets must be at least 1"},
		{yamlEntry(sha, allowAll, "    max_tickets: 2e3"), "k.yaml:7: key \"svc\": max_tickets must be a whole number"},
		{yamlEntry(sha, allowAll, "    max_sessions: 1000000001"), "k.yaml:7: key \"svc\": max_sessions must be at least 1 and at most 1000000000"},
		{yamlEntry(sha, allowAll, "    max_sessions: [1]"), "k.yaml:7: key \"svc\": max_sessions must be a whole number"},
		{"keys:\n  - name: Svc\n" + sha + "\n" + allowAll + "\n", "k.yaml:2: keys[0]: name \"Svc\" must be 1 to 64 of a-z 0-9 . _ -"},
		{"keys:\n  - name: " + strings.Repeat("a", 65) + "\n" + sha + "\n" + allowAll + "\n", "keys[0]: name (a value of 65 characters, not shown)"},
		{"keys:\n  - " + sha[4:] + "\n" + allowAll + "\n", "k.yaml:2: keys[0] has no name"},
		{yamlEntry(sha, allowAll) + "  - name: svc\n    sha256: " + sumB + "\n" + allowAll + "\n",
			"k.yaml:7: name \"svc\" is already used at line 2"},
		{yamlEntry(sha, allowAll) + "  - name: two\n" + sha + "\n" + allowAll + "\n",
			"k.yaml:7: key \"two\": its sha256 is the same as key \"svc\"'s at line 2"},
		{yamlEntry(sha, allowAll) + "  - name: two\n    sha256: " + strings.ToUpper(sumA) + "\n" + allowAll + "\n",
			"k.yaml:7: key \"two\": its sha256 is the same as key \"svc\"'s at line 2"},
		{yamlEntry("    cert_cn: w1", allowAll) + "  - name: two\n    cert_cn: w1\n" + allowAll + "\n",
			"k.yaml:7: key \"two\": cert_cn \"w1\" is already key \"svc\"'s at line 2"},
		{"base: &b\n  names: \"*\"\nkeys: []\n", "k.yaml:1: the file: unknown field \"base\""},
		{yamlEntry(sha, "    allow:\n      - <<: {names: \"*\"}\n        actions: [lock]"), "merge keys (<<) are not supported"},
		// JSON: the same rules, with lines.
		{`{"keys": [}`, "k.json:1: invalid JSON"},
		{"{\n\"keys\": [\n{\"name\": \"svc\",\n\"sha256\": \"" + sumA + "\",\n\"allow\": [{\"names\": \"*\", \"actions\": [\"lock\", \"fly\"]}]}]}",
			"k.json:5: key \"svc\": allow[0]: unknown action \"fly\""},
		{"{\"keys\": []}\n{}", "k.json:2: invalid JSON: more data"},
		{"{\"keys\": [], \"keys\": []}", "k.json:1: the file: field \"keys\" is repeated"},
		{"{\n\t\"keys\": [\n\t\t{\"name\": \"svc\", \"sha256\": \"" + sumA + "\", \"allow\": [], \"rate\": 1}\n\t]\n}",
			"k.json:3: key \"svc\": unknown field \"rate\""},
		{"{\"keys\": [{\"name\": null}]}", "keys[0]: name must be a string"},
		{"{\"keys\": [" + strings.Repeat("[", 100) + "]}", "nested too deeply"},
		{"{\"keys\": [\n", "k.json:2: invalid JSON: the file ends inside a value"},
	}
	for _, tt := range tests {
		file := "k.yaml"
		if strings.HasPrefix(tt.give, "{") {
			file = "k.json"
		}
		_, err := ParseKeys(file, []byte(tt.give))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKeys(%s, %q)\n got: %v\nwant: an error with %q", file, tt.give, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), keyA) || strings.Contains(err.Error(), sumA)) {
			t.Errorf("ParseKeys(%q): the error repeats a key or hash: %v", tt.give, err)
		}
	}
}

func TestParseKeysReportsSeveralErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("keys:\n")
	for range 15 {
		b.WriteString("  - name: BAD\n" + allowAll + "\n")
	}
	_, err := ParseKeys("k.yaml", []byte(b.String()))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || !strings.Contains(lines[maxErrors], "more errors") {
		t.Errorf("got %d lines, the last %q; want %d errors and a count of the rest", len(lines), lines[len(lines)-1], maxErrors)
	}
}

func TestParseKeysAliases(t *testing.T) {
	give := withSums(`keys:
  - name: a
    sha256: SUM_A
    allow: &std
      - names: "jobs:*"
        actions: [lock, read]
  - name: b
    sha256: SUM_B
    allow: *std
`)
	keys, err := ParseKeys("k.yaml", []byte(give))
	if err != nil {
		t.Fatal(err)
	}
	if !keys[1].Allow[0].Allows(ActionRead, "jobs:x") {
		t.Errorf("the alias did not carry the grant: %+v", keys[1])
	}
}

func TestParseKeysBillionLaughs(t *testing.T) {
	// Each level refers to the one before ten times: 10^8 nodes if expanded.
	var b strings.Builder
	b.WriteString("a0: &a0 [lock]\n")
	for i := 1; i <= 8; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	b.WriteString("keys: []\n")
	if _, err := ParseKeys("k.yaml", []byte(b.String())); err == nil {
		t.Fatal("no error")
	}
}

func TestReadKeysFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(good, []byte(withSums(goodYAML)), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want string
	}{
		{dir, dir + ": is a directory, not a keys file"},
		{filepath.Join(dir, "missing.yaml"), "missing.yaml: cannot read the keys file: no such file or directory"},
		{empty, "empty.yaml: the file is empty"},
		{"/dev/null", "/dev/null: is not a regular file"},
	}
	for _, tt := range tests {
		_, err := ReadKeys(tt.give)
		var fe *FileError
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &fe) {
			t.Errorf("ReadKeys(%s) = %v, want a *FileError with %q", tt.give, err, tt.want)
		}
	}
	if keys, err := ReadKeys(good); err != nil || len(keys) != 3 {
		t.Errorf("ReadKeys(good) = %d keys, %v", len(keys), err)
	}
}

func TestReadKeysUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte("keys: []\n"), 0o000); err != nil {
		t.Fatal(err)
	}
	_, err := ReadKeys(path)
	if err == nil || !strings.Contains(err.Error(), "keys.yaml: cannot read the keys file: permission denied") {
		t.Errorf("ReadKeys(unreadable) = %v", err)
	}
}
