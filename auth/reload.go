package auth

import (
	"context"
	"os"
	"time"
)

// DefaultWatchInterval is how often Watch looks at the keys file when given no
// interval: well within the 10 s the contract allows for noticing a change.
const DefaultWatchInterval = 2 * time.Second

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

// load reads the keys file and swaps in its keys; the caller holds g.mu. The
// stat comes first, so a change during the read is seen by the next look.
func (g *Guard) load() error {
	g.lastSig = statSig(g.file)
	keys, err := ReadKeys(g.file)
	if err != nil {
		return err
	}
	g.ring.Store(newKeyring(keys, g.ring.Load(), g.keyWaiters))
	ev := g.log.Info()
	if len(keys) == 0 {
		ev = g.log.Warn()
	}
	ev.Str("file", g.file).Int("keys", len(keys)).Msg("keys file loaded")
	return nil
}

// Reload reads the keys file again; call it on SIGHUP. A file that cannot be
// read or is invalid leaves the keys in force unchanged, is logged with every
// error's file and line, counts one reload error, and is returned. Principals
// that stay keep their rate-limit bucket and long-poll count; requests in
// flight finish with the principal they started with. Outside keys mode Reload
// does nothing.
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
	if err != nil {
		g.log.Error().Err(err).Str("file", g.file).Msg("keys file not reloaded: the previous keys stay in force")
		if g.errs != nil {
			g.errs.Inc()
		}
	}
	return err
}

// Watch reloads the keys file whenever a stat every interval (DefaultWatchInterval
// when interval <= 0) finds it changed: its time, size, mode or inode, or its
// disappearance or return. A vanished file is one reload error, not one per
// look. Watch returns when ctx is done; outside keys mode it only waits for that.
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
			g.mu.Lock()
			if !statSig(g.file).same(g.lastSig) {
				g.reload() // logged and counted there
			}
			g.mu.Unlock()
		}
	}
}
