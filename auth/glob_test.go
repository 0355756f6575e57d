package auth

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"time"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		give string
		name string
		want bool
	}{
		{"billing:*", "billing:invoice", true},
		{"billing:*", "billing:", true},
		{"billing:*", "billing", false},
		{"billing:*", "Billing:x", false},
		{"*", "a", true},
		{"*", "x:y.z-1_2", true},
		{"?", "a", true},
		{"?", "ab", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*.lock", "db.lock", true},
		{"*.lock", "db.locks", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a**b", "ab", true},
		{"a*?", "a", false},
		{"a*?", "ab", true},
		{"*?b?*", "xxbx", true},
		{"ab*ba", "aba", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"a*a*a*a*b", strings.Repeat("a", 200), false},
		{"a*a*a*a*b", strings.Repeat("a", 199) + "b", true},
	}
	for _, tt := range tests {
		g, err := CompileGlob(tt.give)
		if err != nil {
			t.Fatalf("CompileGlob(%q): %v", tt.give, err)
		}
		if got := g.Match(tt.name); got != tt.want {
			t.Errorf("CompileGlob(%q).Match(%q) = %v, want %v", tt.give, tt.name, got, tt.want)
		}
	}
}

func TestGlobMatchesPathMatch(t *testing.T) {
	// path.Match has the same '*' and '?' over names without '/', '[' or '\\':
	// a reference implementation to compare with on random input.
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "ab*?"
	for range 20000 {
		pat := randString(rng, alphabet, 1+rng.IntN(8))
		name := randString(rng, "ab", 1+rng.IntN(10))
		g, err := CompileGlob(pat)
		if err != nil {
			t.Fatalf("CompileGlob(%q): %v", pat, err)
		}
		want, _ := path.Match(pat, name)
		if got := g.Match(name); got != want {
			t.Fatalf("CompileGlob(%q).Match(%q) = %v, path.Match says %v", pat, name, got, want)
		}
	}
}

func randString(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

func TestGlobNoBacktracking(t *testing.T) {
	// Patterns that make a backtracking matcher exponential. Each match must
	// take microseconds; a generous bound keeps -race on a busy machine green.
	name := strings.Repeat("a", MaxNameLen)
	for _, pat := range []string{
		strings.Repeat("a*", 50) + "b",
		strings.Repeat("*a", 50) + "*b",
		strings.Repeat("?*", 60) + "b",
		strings.Repeat("*?a", 30) + "*ab",
	} {
		g, err := CompileGlob(pat)
		if err != nil {
			t.Fatalf("CompileGlob(%q): %v", pat, err)
		}
		start := time.Now()
		for range 100 {
			if g.Match(name) {
				t.Fatalf("CompileGlob(%q).Match(a…) = true, want false", pat)
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("100 matches of %q took %v", pat, d)
		}
	}
}

func TestCompileGlobRejectsWhatMatchesNothing(t *testing.T) {
	tests := []struct {
		give string
		want string // in the error
	}{
		{"", "empty"},
		{".", `only "."`},
		{"..", `only ".."`},
		{"billing/*", `"/"`},
		{"a b", "a space"},
		{"[ab]", `"["`},
		{"café", "byte 0xc3"},
		{strings.Repeat("?", MaxNameLen+1), "at least 201"},
		{strings.Repeat("a", 150) + "*" + strings.Repeat("b", 51), "at least 201"},
	}
	for _, tt := range tests {
		_, err := CompileGlob(tt.give)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CompileGlob(%q) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
	for _, ok := range []string{"*", "?", ".*", "..?", "*.", strings.Repeat("?", MaxNameLen), strings.Repeat("*", 1000)} {
		if _, err := CompileGlob(ok); err != nil {
			t.Errorf("CompileGlob(%q): %v, want it accepted", ok, err)
		}
	}
}

func TestValidLockName(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"a", true}, {"A.b_c:d-9", true}, {strings.Repeat("x", 200), true},
		{"", false}, {".", false}, {"..", false}, {"...", true},
		{strings.Repeat("x", 201), false}, {"a/b", false}, {"a b", false},
	}
	for _, tt := range tests {
		if got := ValidLockName(tt.give); got != tt.want {
			t.Errorf("ValidLockName(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
