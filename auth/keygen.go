package auth

import (
	"errors"
	"fmt"
	"strings"
)

// ParseAllow parses a grant written "GLOB=ACTION,ACTION" (keygen's --allow),
// under the rules of the keys file. It returns an error saying what is wrong.
func ParseAllow(s string) (Grant, error) {
	glob, actions, ok := strings.Cut(s, "=")
	if !ok {
		return Grant{}, fmt.Errorf("%s is not GLOB=ACTION,ACTION (for example 'billing:*=lock,read')", show(s))
	}
	g, err := CompileGlob(glob)
	if err != nil {
		return Grant{}, err
	}
	var list []Action
	for _, name := range strings.Split(actions, ",") {
		a, err := ParseAction(strings.TrimSpace(name))
		if err != nil {
			return Grant{}, fmt.Errorf("%s: %w", show(s), err)
		}
		list = append(list, a)
	}
	return NewGrant(g, list...)
}

// FileEntry renders the keys-file entry for a key named name whose SHA-256 is
// keySHA256, with grants: YAML, indented as one item of the keys: list. It never
// sees the key. It returns an error when the name, the hash or the grants would
// not pass the keys file's own validation.
func FileEntry(name, keySHA256 string, grants []Grant) (string, error) {
	if !validKeyName(name) {
		return "", fmt.Errorf("name %s must be 1 to 64 of a-z 0-9 . _ -", show(name))
	}
	if !isHex64(keySHA256) {
		return "", errors.New("the key's SHA-256 must be 64 hex characters")
	}
	if len(grants) == 0 {
		return "", errors.New("a key needs at least one grant")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n    allow:\n", name, strings.ToLower(keySHA256))
	for _, g := range grants {
		if g.Names.String() == "" || g.listed == 0 {
			return "", errors.New("a grant needs a glob and at least one action")
		}
		// Globs hold only [A-Za-z0-9._:*?-], which need no escaping in double quotes.
		fmt.Fprintf(&b, "      - names: %q\n        actions: [%s]\n", g.Names, strings.ReplaceAll(g.listed.String(), ",", ", "))
	}
	entry := b.String()
	if _, err := ParseKeys("entry.yaml", []byte("keys:\n"+entry)); err != nil {
		return "", fmt.Errorf("the entry does not validate: %w", err)
	}
	return entry, nil
}
