package auth

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

const (
	maxKeyNameLen = 64
	maxRate       = 1e9 // requests per second; beyond any process
	maxWaiters    = 1_000_000_000
	maxObjects    = 1_000_000_000 // max_holds, max_tickets, max_sessions
)

// The fields of the keys file, in the order the docs show them.
var (
	fileFields = []string{"keys"}
	keyFields  = []string{"name", "sha256", "cert_cn", "cert_uri", "allow", "rate_per_s", "max_waiters",
		"max_holds", "max_tickets", "max_sessions"}
	grantFields = []string{"names", "actions"}
)

// seen remembers where a unique value was first used.
type seen struct {
	line int
	name string
}

// exhausted reports, once, that the file needs more work than any keys file
// should (aliases of aliases).
func (p *parser) exhausted() bool {
	if p.visits <= maxNodes {
		return false
	}
	if p.visits != math.MaxInt {
		p.errorf(0, "the file expands to more than %d values (aliases of aliases?)", maxNodes)
		p.visits = math.MaxInt
	}
	return true
}

// file_ validates the top level: a mapping with one field, keys.
func (p *parser) file_(root *yaml.Node) []Key {
	root = p.resolve(root)
	if root == nil || root.Kind != yaml.MappingNode {
		line := 0
		if root != nil {
			line = root.Line
		}
		p.errorf(line, "the file must be a mapping with a keys: list")
		return nil
	}
	f, ok := p.fields(root, "the file", fileFields...)["keys"]
	if !ok {
		if len(p.errs) == 0 {
			p.errorf(root.Line, "the file has no keys: list")
		}
		return nil
	}
	items, ok := p.seq(f, "keys")
	if !ok {
		return nil
	}
	keys := make([]Key, 0, len(items))
	names, hashes, cns, uris := map[string]seen{}, map[string]seen{}, map[string]seen{}, map[string]seen{}
	for i, n := range items {
		if p.exhausted() {
			return nil
		}
		k, ok := p.entry(n, i)
		if !ok {
			continue
		}
		if s, dup := names[k.Name]; dup {
			p.errorf(k.Line, "name %q is already used at line %d", k.Name, s.line)
		} else {
			names[k.Name] = seen{k.Line, k.Name}
		}
		if s, dup := hashes[k.SHA256]; k.SHA256 != "" && dup {
			p.errorf(k.Line, "key %q: its sha256 is the same as key %q's at line %d: every key must be different", k.Name, s.name, s.line)
		} else if k.SHA256 != "" {
			hashes[k.SHA256] = seen{k.Line, k.Name}
		}
		if s, dup := cns[k.CertCN]; k.CertCN != "" && dup {
			p.errorf(k.Line, "key %q: cert_cn %s is already key %q's at line %d", k.Name, show(k.CertCN), s.name, s.line)
		} else if k.CertCN != "" {
			cns[k.CertCN] = seen{k.Line, k.Name}
		}
		if s, dup := uris[k.CertURI]; k.CertURI != "" && dup {
			p.errorf(k.Line, "key %q: cert_uri %s is already key %q's at line %d", k.Name, show(k.CertURI), s.name, s.line)
		} else if k.CertURI != "" {
			uris[k.CertURI] = seen{k.Line, k.Name}
		}
		keys = append(keys, k)
	}
	return keys
}

// entry validates one key entry; i is its index, for messages until the name is known.
func (p *parser) entry(n *yaml.Node, i int) (Key, bool) {
	what := fmt.Sprintf("keys[%d]", i)
	if n == nil || n.Kind != yaml.MappingNode {
		line := 0
		if n != nil {
			line = n.Line
		}
		p.errorf(line, "%s must be a mapping with name, sha256 (or cert_cn, or cert_uri) and allow", what)
		return Key{}, false
	}
	before := len(p.errs) + p.more
	k := Key{Line: n.Line}
	if name := nameOf(n); validKeyName(name) {
		what = fmt.Sprintf("key %q", name) // for every message, the fields' too
	}
	fs := p.fields(n, what, keyFields...)
	if f, ok := fs["name"]; !ok {
		p.errorf(n.Line, "%s has no name", what)
	} else if s, ok := p.str(f, what+": name"); ok {
		if validKeyName(s) {
			k.Name = s
		} else {
			p.errorf(f.line, "%s: name %s must be 1 to 64 of a-z 0-9 . _ -", what, show(s))
		}
	}
	p.credential(fs, &k, n.Line, what)
	if f, ok := fs["allow"]; !ok {
		p.errorf(n.Line, "%s has no allow list: a key needs at least one grant", what)
	} else {
		k.Allow = p.allow(f, what)
	}
	if f, ok := fs["rate_per_s"]; ok {
		k.RatePerS = p.rate(f, what)
	}
	if f, ok := fs["max_waiters"]; ok {
		k.MaxWaiters = p.count(f, what, "max_waiters", maxWaiters)
	}
	for _, c := range []struct {
		field string
		v     *int
	}{{"max_holds", &k.MaxHolds}, {"max_tickets", &k.MaxTickets}, {"max_sessions", &k.MaxSessions}} {
		if f, ok := fs[c.field]; ok {
			*c.v = p.count(f, what, c.field, maxObjects)
		}
	}
	return k, len(p.errs)+p.more == before
}

// nameOf returns the value of an entry's first name field, or "".
func nameOf(n *yaml.Node) string {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			return v.Value
		}
	}
	return ""
}

// credential reads exactly one of sha256, cert_cn and cert_uri into k.
func (p *parser) credential(fs map[string]field, k *Key, line int, what string) {
	var given []string
	for _, f := range []string{"sha256", "cert_cn", "cert_uri"} {
		if _, ok := fs[f]; ok {
			given = append(given, f)
		}
	}
	switch len(given) {
	case 0:
		p.errorf(line, "%s has none of sha256, cert_cn and cert_uri: give exactly one", what)
		return
	case 1:
	default:
		p.errorf(fs[given[1]].line, "%s has both %s and %s: give exactly one of sha256, cert_cn and cert_uri", what, given[0], given[1])
		return
	}
	f := fs[given[0]]
	s, ok := p.str(f, what+": "+given[0])
	if !ok {
		return
	}
	switch given[0] {
	case "sha256":
		if !isHex64(s) {
			p.errorf(f.line, "%s: sha256 must be 64 hex characters, the SHA-256 of the key (%s)", what, sumProblem(s))
			return
		}
		k.SHA256 = strings.ToLower(s)
	case "cert_cn":
		if s == "" || len(s) > 256 || strings.TrimSpace(s) != s {
			p.errorf(f.line, "%s: cert_cn must be a certificate's common name: 1 to 256 characters, no surrounding spaces", what)
			return
		}
		k.CertCN = s
	default:
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || len(s) > 1024 || strings.ContainsAny(s, " \t\r\n") {
			p.errorf(f.line, "%s: cert_uri must be an absolute URI of at most 1024 characters, as a client certificate's "+
				"subject alternative name holds it (such as spiffe://example.org/worker)", what)
			return
		}
		k.CertURI = u.String()
	}
}

// sumProblem says what is wrong with a sha256 value without repeating it.
func sumProblem(s string) string {
	switch {
	case strings.HasPrefix(s, keyPrefix):
		return "this looks like the key itself: put its SHA-256 here, as baton keygen prints it, and keep the key out of this file"
	case len(s) != 64:
		return fmt.Sprintf("this one has %d", len(s))
	default:
		return "this one has characters other than 0-9 a-f"
	}
}

// allow validates a non-empty list of grants.
func (p *parser) allow(f field, what string) []Grant {
	items, ok := p.seq(f, what+": allow")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(f.line, "%s: allow is empty: a key needs at least one grant", what)
		return nil
	}
	grants := make([]Grant, 0, len(items))
	for j, n := range items {
		if p.exhausted() {
			return nil
		}
		gwhat := fmt.Sprintf("%s: allow[%d]", what, j)
		if n == nil || n.Kind != yaml.MappingNode {
			p.errorf(f.line, "%s must be a mapping with names and actions", gwhat)
			continue
		}
		if g, ok := p.grant(n, gwhat); ok {
			grants = append(grants, g)
		}
	}
	return grants
}

// grant validates one {names, actions} entry.
func (p *parser) grant(n *yaml.Node, what string) (Grant, bool) {
	fs := p.fields(n, what, grantFields...)
	var g Grant
	ok := true
	if f, has := fs["names"]; !has {
		p.errorf(n.Line, "%s has no names (a glob over lock names, such as \"billing:*\")", what)
		ok = false
	} else if f.val != nil && f.val.Kind == yaml.SequenceNode {
		p.errorf(f.line, "%s: names is one glob, not a list: write one allow entry per glob", what)
		ok = false
	} else if s, isStr := p.str(f, what+": names"); !isStr {
		ok = false
	} else if glob, err := CompileGlob(s); err != nil {
		p.errorf(f.line, "%s: %v", what, err)
		ok = false
	} else {
		g.Names = glob
	}
	f, has := fs["actions"]
	if !has {
		p.errorf(n.Line, "%s has no actions (some of lock, read, admin, metrics)", what)
		return g, false
	}
	items, isSeq := p.seq(f, what+": actions")
	if !isSeq {
		return g, false
	}
	if len(items) == 0 {
		p.errorf(f.line, "%s: actions is empty: give some of lock, read, admin, metrics", what)
		return g, false
	}
	for _, a := range items {
		if p.exhausted() {
			return g, false
		}
		if a == nil || a.Kind != yaml.ScalarNode {
			p.errorf(f.line, "%s: an action must be a string", what)
			ok = false
			continue
		}
		act, err := ParseAction(a.Value)
		if err != nil {
			p.errorf(a.Line, "%s: %v", what, err)
			ok = false
			continue
		}
		g.listed |= actionSet(act)
		g.set = g.set.with(act)
	}
	return g, ok
}

// rate validates rate_per_s: a finite number above 0.
func (p *parser) rate(f field, what string) float64 {
	n := f.val
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		p.errorf(f.line, "%s: rate_per_s must be a number of requests per second", what)
		return 0
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || v <= 0 || v > maxRate {
		p.errorf(f.line, "%s: rate_per_s must be above 0 and at most %d (leave it out for no limit)", what, int64(maxRate))
		return 0
	}
	return v
}

// count validates a cap (max_waiters, max_holds, ...), the field name: a
// whole number of at least 1 and at most most.
func (p *parser) count(f field, what, name string, most int) int {
	n := f.val
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		p.errorf(f.line, "%s: %s must be a whole number", what, name)
		return 0
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil {
		if err := n.Decode(&v); err != nil {
			v = -1
		}
	}
	if v < 1 || v > int64(most) {
		p.errorf(f.line, "%s: %s must be at least 1 and at most %d (leave it out for the server's default)", what, name, most)
		return 0
	}
	return int(v)
}

// validKeyName reports whether s matches ^[a-z0-9._-]{1,64}$.
func validKeyName(s string) bool {
	if s == "" || len(s) > maxKeyNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
