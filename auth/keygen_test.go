package auth

import (
	"regexp"
	"strings"
	"testing"
)

func TestNewKey(t *testing.T) {
	format := regexp.MustCompile(`^bk_[A-Za-z0-9_-]{43}$`)
	seen := map[string]bool{}
	for range 100 {
		k := NewKey()
		if !format.MatchString(k) {
			t.Fatalf("NewKey() = a key of %d characters not in the bk_ format", len(k))
		}
		if seen[k] {
			t.Fatal("NewKey() repeated itself")
		}
		seen[k] = true
		if _, err := bearerToken([]string{"Bearer " + k}); err != nil {
			t.Fatalf("a new key is not a valid Bearer key: %v", err)
		}
	}
}

func TestParseAllow(t *testing.T) {
	tests := []struct {
		give    string
		want    string // the grant's actions, or the error
		wantErr bool
	}{
		{give: "billing:*=lock,read", want: "lock,read"},
		{give: "*=admin", want: "lock,read,admin"},
		{give: "*=metrics, lock", want: "lock,metrics"},
		{give: "jobs:?=lock,lock", want: "lock"},
		{give: "billing:*", want: "is not GLOB=ACTION,ACTION", wantErr: true},
		{give: "=lock", want: "the glob is empty", wantErr: true},
		{give: "*=", want: `unknown action ""`, wantErr: true},
		{give: "*=lock,write", want: `unknown action "write"`, wantErr: true},
		{give: "a/b=lock", want: `has "/"`, wantErr: true},
		{give: "..=read", want: `would match only ".."`, wantErr: true},
	}
	for _, tt := range tests {
		g, err := ParseAllow(tt.give)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = g.set.String()
		}
		if (err != nil) != tt.wantErr || !strings.Contains(got, tt.want) {
			t.Errorf("ParseAllow(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

func TestFileEntryRoundTrip(t *testing.T) {
	key := NewKey()
	g1, _ := ParseAllow("billing:*=lock,read")
	g2, _ := ParseAllow("*=admin,metrics")
	entry, err := FileEntry("billing-web", KeySHA256(key), []Grant{g1, g2})
	if err != nil {
		t.Fatal(err)
	}
	want := `  - name: billing-web
    sha256: ` + KeySHA256(key) + `
    allow:
      - names: "billing:*"
        actions: [lock, read]
      - names: "*"
        actions: [admin, metrics]
`
	if entry != want {
		t.Errorf("FileEntry =\n%s\nwant\n%s", entry, want)
	}
	if strings.Contains(entry, key) {
		t.Fatal("the entry holds the key")
	}
	keys, err := ParseKeys("k.yaml", []byte("keys:\n"+entry))
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(Config{File: writeFile(t, t.TempDir(), "k.yaml", "keys:\n"+entry)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Authenticate(request("10.0.0.1:1", "Bearer "+key))
	if err != nil || len(keys) != 1 {
		t.Fatalf("the generated entry does not authenticate its key: %v, %v", p, err)
	}
	if p.Name() != "billing-web" || !p.Can(ActionRead, "billing:x") || !p.Can(ActionAdmin, "payroll") || !p.CanMetrics() {
		t.Errorf("the generated entry's grants are not as written: %+v", p.Grants())
	}
}

func TestFileEntryErrors(t *testing.T) {
	g, _ := ParseAllow("*=lock")
	tests := []struct {
		name, sum string
		grants    []Grant
		want      string
	}{
		{"Bad Name", KeySHA256("x"), []Grant{g}, "name \"Bad Name\" must be"},
		{"ok", "abc", []Grant{g}, "64 hex"},
		{"ok", KeySHA256("x"), nil, "at least one grant"},
		{"ok", KeySHA256("x"), []Grant{{}}, "a grant needs"},
	}
	for _, tt := range tests {
		_, err := FileEntry(tt.name, tt.sum, tt.grants)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("FileEntry(%q, %q, %d grants) = %v, want %q", tt.name, tt.sum, len(tt.grants), err, tt.want)
		}
	}
}
