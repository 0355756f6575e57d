package auth

import (
	"errors"
	"fmt"
	"strings"
)

// MaxNameLen is the longest lock name the API accepts.
const MaxNameLen = 200

// Glob is a compiled pattern over lock names: '*' matches any run of characters
// (the empty one too), '?' exactly one, and every other character itself. It is
// compiled once, when the keys file is read; matching allocates nothing.
type Glob struct {
	pattern string
	// segs are the pieces between the stars, '?' kept in them; a pattern with n
	// stars (runs of stars count once) has n+1 segments.
	segs   []string
	minLen int // the length of the shortest name it matches
}

// CompileGlob compiles pattern. It returns an error when the pattern can match no
// valid lock name (^[A-Za-z0-9._:-]{1,200}$, and neither "." nor ".."): it is
// empty, has a character no lock name has, needs more than 200 characters, or is
// exactly "." or "..".
func CompileGlob(pattern string) (Glob, error) {
	if pattern == "" {
		return Glob{}, errors.New("the glob is empty and would match no lock name")
	}
	if pattern == "." || pattern == ".." {
		return Glob{}, fmt.Errorf("the glob %q would match only %q, which is not a valid lock name", pattern, pattern)
	}
	g := Glob{pattern: pattern}
	var seg strings.Builder
	star := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*':
			if !star {
				g.segs = append(g.segs, seg.String())
				seg.Reset()
				star = true
			}
			continue
		case c == '?' || nameByte(c):
			g.minLen++
		default:
			return Glob{}, fmt.Errorf("the glob %s has %s, which no lock name has (lock names are A-Z a-z 0-9 . _ : -; globs know only * and ?)", show(pattern), showByte(c))
		}
		star = false
		seg.WriteByte(c)
	}
	g.segs = append(g.segs, seg.String())
	if g.minLen > MaxNameLen {
		return Glob{}, fmt.Errorf("the glob needs at least %d characters, more than the longest lock name (%d)", g.minLen, MaxNameLen)
	}
	return g, nil
}

// String returns the pattern as written.
func (g Glob) String() string { return g.pattern }

// Match reports whether name matches the whole pattern. It takes time linear in
// len(name) for patterns without '?', and at most len(name)*len(pattern) steps
// with them: the leftmost-first placement of each segment never needs to be
// undone, so there is no backtracking.
func (g Glob) Match(name string) bool {
	if len(name) < g.minLen || len(g.segs) == 0 {
		return false
	}
	if len(g.segs) == 1 { // no star
		return len(name) == len(g.segs[0]) && segAt(g.segs[0], name)
	}
	first, last := g.segs[0], g.segs[len(g.segs)-1]
	if !segAt(first, name) || !segAt(last, name[len(name)-len(last):]) {
		return false
	}
	rest := name[len(first) : len(name)-len(last)]
	for _, seg := range g.segs[1 : len(g.segs)-1] {
		i := segIndex(rest, seg)
		if i < 0 {
			return false
		}
		rest = rest[i+len(seg):]
	}
	return true
}

// segAt reports whether s starts with seg, '?' in seg matching any byte.
func segAt(seg, s string) bool {
	if len(s) < len(seg) {
		return false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] != '?' && seg[i] != s[i] {
			return false
		}
	}
	return true
}

// segIndex returns the first index of seg in s, '?' in seg matching any byte, or -1.
func segIndex(s, seg string) int {
	if strings.IndexByte(seg, '?') < 0 {
		return strings.Index(s, seg)
	}
	for i := 0; i+len(seg) <= len(s); i++ {
		if segAt(seg, s[i:]) {
			return i
		}
	}
	return -1
}

// nameByte reports whether c may appear in a lock name.
func nameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

// ValidLockName reports whether name is a lock name the API accepts:
// ^[A-Za-z0-9._:-]{1,200}$, and neither "." nor "..".
func ValidLockName(name string) bool {
	if name == "" || len(name) > MaxNameLen || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return false
		}
	}
	return true
}
