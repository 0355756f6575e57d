package auth

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// DefaultWatchInterval is how often Watch looks at the keys file when given no
// interval. A change is loaded once two looks in a row find it the same, so
// within two to three intervals: well within the 10 s the contract allows.
const DefaultWatchInterval = 2 * time.Second

// maxLoggedNames bounds the principal names one log line lists.
const maxLoggedNames = 100

// fileSig is what a stat tells of a file's version. Comparing the inode too
// catches an atomic rename (and a Kubernetes ConfigMap's symlink swap) that
// keeps the size and, at coarse resolution, the time.
type fileSig struct {
	fi  os.FileInfo // nil when the file was missing or unreadable
	err string
}

func statSig(path string) fileSig {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{err: err.Error()}
	}
	return fileSig{fi: fi}
}

func (s fileSig) same(o fileSig) bool {
	if s.fi == nil || o.fi == nil {
		return s.fi == nil && o.fi == nil && s.err == o.err
	}
	return s.fi.ModTime().Equal(o.fi.ModTime()) && s.fi.Size() == o.fi.Size() &&
		s.fi.Mode() == o.fi.Mode() && os.SameFile(s.fi, o.fi)
}

// load checks who may write the keys file, reads it, and swaps in its keys;
// the caller holds g.mu. The stat comes first, so a change during the read is
// seen by the next look. A reload logs the principals it added, removed and
// changed.
func (g *Guard) load() error {
	g.lastSig = statSig(g.file)
	if err := CheckFileAccess(g.file, os.Geteuid()); err != nil {
		return err
	}
	keys, err := ReadKeys(g.file)
	if err != nil {
		return err
	}
	old := g.ring.Load()
	ring := newKeyring(keys, old, g.keyWaiters, g.keyCaps)
	g.ring.Store(ring)
	ev := g.log.Info()
	if len(keys) == 0 {
		ev = g.log.Warn()
	}
	ev = ev.Str("file", g.file).Int("keys", len(keys))
	if old != nil {
		added, removed, changed := diffKeys(old.keys, keys)
		ev = names(names(names(ev, "added", added), "removed", removed), "changed", changed)
	}
	ev.Msg("keys file loaded")
	return nil
}

// names adds a list of principal names to a log line, as key and key_count,
// at most maxLoggedNames of them.
func names(ev *zerolog.Event, key string, list []string) *zerolog.Event {
	if len(list) == 0 {
		return ev
	}
	return ev.Strs(key, list[:min(len(list), maxLoggedNames)]).Int(key+"_count", len(list))
}

// diffKeys returns the names only in now, only in was, and in both with
// another credential, grants or limits.
func diffKeys(was, now []Key) (added, removed, changed []string) {
	before := make(map[string]Key, len(was))
	for _, k := range was {
		before[k.Name] = k
	}
	for _, k := range now {
		b, ok := before[k.Name]
		switch {
		case !ok:
			added = append(added, k.Name)
		case !sameKey(b, k):
			changed = append(changed, k.Name)
		}
		delete(before, k.Name)
	}
	for name := range before {
		removed = append(removed, name)
	}
	slices.Sort(removed)
	return added, removed, changed
}

func sameKey(a, b Key) bool {
	return a.SHA256 == b.SHA256 && a.CertCN == b.CertCN && a.CertURI == b.CertURI && a.RatePerS == b.RatePerS &&
		a.MaxWaiters == b.MaxWaiters && a.MaxHolds == b.MaxHolds && a.MaxTickets == b.MaxTickets &&
		a.MaxSessions == b.MaxSessions && slices.EqualFunc(a.Allow, b.Allow, func(x, y Grant) bool {
		return x.Names.String() == y.Names.String() && x.set == y.set
	})
}

// Reload reads the keys file again; call it on SIGHUP. It fails closed: a
// file that cannot be used (unreadable, invalid, or writable by someone else:
// see CheckFileAccess) adds and changes nothing, but every key whose sha256
// (or cert_cn, cert_uri) no longer appears in the file is revoked at once,
// so that removing a key works even in an edit that breaks the file (a file
// that cannot be read at all revokes every key). Such a reload is logged with
// every error's file and line and the names revoked, counts one reload error,
// and is returned. Principals that stay keep their rate-limit bucket and
// long-poll count; requests in flight finish with the principal they started
// with. Outside keys mode Reload does nothing.
func (g *Guard) Reload() error {
	if g.mode != ModeKeys {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reload()
}

// reload is Reload with g.mu held.
func (g *Guard) reload() error {
	err := g.load()
	if err == nil {
		return nil
	}
	revoked := g.revokeGone()
	names(g.log.Error().Err(err).Str("file", g.file), "revoked", revoked).
		Msg("keys file not reloaded: nothing was added or changed; keys still in the file stay in force, keys gone from it are revoked")
	if g.errs != nil {
		g.errs.Inc()
	}
	return err
}

// revokeGone drops every key whose credential no longer appears in the keys
// file's text (outside YAML comments), and returns their names; the caller
// holds g.mu.
func (g *Guard) revokeGone() []string {
	ring := g.ring.Load()
	data, err := readFile(g.file)
	if err != nil {
		data = nil // nothing readable: nothing stays
	}
	if !strings.EqualFold(filepath.Ext(g.file), ".json") {
		data = withoutComments(data)
	}
	sums := hexRuns(data)
	var keep []Key
	var revoked []string
	for _, k := range ring.keys {
		in := false
		switch {
		case k.SHA256 != "":
			in = sums[k.SHA256]
		case k.CertCN != "":
			in = bytes.Contains(data, []byte(k.CertCN))
		case k.CertURI != "":
			in = bytes.Contains(data, []byte(k.CertURI))
		}
		if in {
			keep = append(keep, k)
		} else {
			revoked = append(revoked, k.Name)
		}
	}
	if len(revoked) > 0 {
		g.ring.Store(newKeyring(keep, ring, g.keyWaiters, g.keyCaps))
	}
	return revoked
}

// withoutComments is YAML text without its comments: from a '#' that starts a
// line or follows a space or tab, to the line's end. A '#' inside a quoted
// string is cut too, which can only revoke more.
func withoutComments(data []byte) []byte {
	lines := bytes.Split(data, []byte("\n"))
	for i, l := range lines {
		for j := 0; j < len(l); j++ {
			if l[j] == '#' && (j == 0 || l[j-1] == ' ' || l[j-1] == '\t') {
				lines[i] = l[:j]
				break
			}
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// hexRuns returns, lower-cased, every run of exactly 64 hex digits in data:
// the sha256 values a keys file could hold.
func hexRuns(data []byte) map[string]bool {
	out := make(map[string]bool)
	isHex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }
	for i := 0; i < len(data); {
		if !isHex(data[i]) {
			i++
			continue
		}
		j := i
		for j < len(data) && isHex(data[j]) {
			j++
		}
		if j-i == 64 {
			out[strings.ToLower(string(data[i:j]))] = true
		}
		i = j
	}
	return out
}

// Watch reloads the keys file when it has changed (its time, size, mode or
// inode, or its disappearance or return) and then stayed the same for two
// looks in a row, one every interval (DefaultWatchInterval when interval <=
// 0): a file still being written is not loaded half-written. A file that
// stays broken is one reload error, not one per look. Watch returns when ctx
// is done; outside keys mode it only waits for that.
func (g *Guard) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	if g.mode != ModeKeys {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.look()
		}
	}
}

// look is one look of Watch: a change is remembered, and loaded when the next
// look finds the file as this one did.
func (g *Guard) look() {
	g.mu.Lock()
	defer g.mu.Unlock()
	sig := statSig(g.file)
	switch {
	case sig.same(g.lastSig):
		g.pending = nil
	case g.pending != nil && sig.same(*g.pending):
		g.pending = nil
		g.reload() // logged and counted there
	default:
		g.pending = &sig
	}
}
