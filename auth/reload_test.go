package auth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }

// authAs reports the principal a Bearer key authenticates as, or "".
func authAs(g *Guard, key string) string {
	p, err := g.Authenticate(request("10.0.0.1:1", "Bearer "+key))
	if err != nil {
		return ""
	}
	return p.Name()
}

// A reload that fails adds and changes nothing, but fails closed: a key whose
// sha256 is gone from the file is revoked all the same (removing a key and
// breaking the file in one edit must not leave the key working), a key still
// in it keeps working, and a file that cannot be read revokes every key. Each
// failure is logged with its line and the names revoked, and counted.
func TestFailedReloadRevokesKeysGoneFromTheFile(t *testing.T) {
	opsEntry := "  - name: ops\n    sha256: " + sumB + "\n    allow:\n      - names: \"*\"\n        actions: [admin, metrics]\n"
	tests := []struct {
		name        string
		give        func(t *testing.T, dir, path string)
		wantLog     string
		wantA       bool // billing-web's key still works
		wantB       bool // ops's
		wantRevoked string
	}{
		{name: "an invalid file that keeps both keys", give: func(t *testing.T, dir, _ string) {
			writeFile(t, dir, "keys.yaml", strings.Replace(withSums(goodYAML), "[lock, read]", "[lock, reed]", 1))
		}, wantLog: `keys.yaml:7: key \"billing-web\": allow[0]: unknown action \"reed\"`, wantA: true, wantB: true},
		{name: "ops removed in an edit that breaks the file", give: func(t *testing.T, dir, _ string) {
			bad := strings.Replace(withSums(goodYAML), opsEntry, "", 1)
			writeFile(t, dir, "keys.yaml", strings.Replace(bad, "[lock, read]", "[lock, reed]", 1))
		}, wantLog: "unknown action", wantA: true, wantRevoked: `"revoked":["ops"]`},
		{name: "ops commented out in a broken file", give: func(t *testing.T, dir, _ string) {
			commented := strings.ReplaceAll(opsEntry, "\n  ", "\n#  ")
			bad := strings.Replace(withSums(goodYAML), opsEntry, "#"+commented[:len(commented)-1]+"\n", 1)
			writeFile(t, dir, "keys.yaml", bad+"  - oops: [\n")
		}, wantLog: "invalid YAML", wantA: true, wantRevoked: `"revoked":["ops"]`},
		{name: "a key pasted where its hash belongs", give: func(t *testing.T, dir, _ string) {
			writeFile(t, dir, "keys.yaml", strings.Replace(withSums(goodYAML), sumB, keyB, 1))
		}, wantLog: "this looks like the key itself", wantA: true, wantRevoked: `"revoked":["ops"]`},
		{name: "empty", give: func(t *testing.T, dir, _ string) { writeFile(t, dir, "keys.yaml", "") },
			wantLog: "the file is empty", wantRevoked: `"revoked":["billing-web","ops","worker-1"]`},
		{name: "a directory", give: func(t *testing.T, _, path string) {
			os.Remove(path)
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, wantLog: "is a directory", wantRevoked: `"revoked":["billing-web","ops","worker-1"]`},
		{name: "missing", give: func(_ *testing.T, _, path string) { os.Remove(path) }, wantLog: "no such file",
			wantRevoked: `"revoked":["billing-web","ops","worker-1"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "keys.yaml", withSums(goodYAML))
			var log syncBuffer
			var errs counter
			g, err := NewGuard(Config{File: path, Logger: zerolog.New(&log), ReloadErrors: &errs})
			if err != nil {
				t.Fatal(err)
			}
			tt.give(t, dir, path)
			if err := g.Reload(); err == nil {
				t.Fatal("Reload() = nil")
			}
			if got := errs.n.Load(); got != 1 {
				t.Errorf("reload errors = %d, want 1", got)
			}
			if !strings.Contains(log.String(), tt.wantLog) || !strings.Contains(log.String(), tt.wantRevoked) {
				t.Errorf("the log lacks %q or %q:\n%s", tt.wantLog, tt.wantRevoked, log.String())
			}
			if got := authAs(g, keyA) == "billing-web"; got != tt.wantA {
				t.Errorf("billing-web's key works: %v, want %v", got, tt.wantA)
			}
			if got := authAs(g, keyB) == "ops"; got != tt.wantB {
				t.Errorf("ops's key works: %v, want %v", got, tt.wantB)
			}
			if strings.Contains(log.String(), keyB) || strings.Contains(log.String(), keyA) {
				t.Errorf("a key is in the log:\n%s", log.String())
			}
			// Fixed, the file loads again, whole.
			os.Remove(path) // a directory in its place, say
			writeFile(t, dir, "keys.yaml", withSums(goodYAML))
			if err := g.Reload(); err != nil {
				t.Fatal(err)
			}
			if authAs(g, keyA) != "billing-web" || authAs(g, keyB) != "ops" {
				t.Error("the fixed file did not bring the keys back")
			}
		})
	}
}

// A reload logs which principals it added, removed and changed (a rotated
// key, other grants or limits), never a key.
func TestReloadLogsPrincipalsAddedRemovedChanged(t *testing.T) {
	g, path, log := keysGuard(t)
	newKey := "bk_rotated-key-000000000000000000000000000000"
	content := strings.Replace(withSums(goodYAML), sumA, KeySHA256(newKey), 1)
	content = strings.Replace(content, "  - name: ops\n    sha256: "+sumB+"\n    allow:\n      - names: \"*\"\n        actions: [admin, metrics]\n", "", 1)
	content = strings.Replace(content, "names: \"jobs:?\"", "names: \"jobs:*\"", 1)
	content += "  - name: newcomer\n    sha256: " + sumB + "\n" + allowAll + "\n"
	writeFile(t, filepath.Dir(path), "keys.yaml", content)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"added":["newcomer"]`, `"removed":["ops"]`, `"changed":["billing-web","worker-1"]`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), newKey) {
		t.Error("a key is in the log")
	}
}

// Watch loads a changed file only once two looks in a row find it the same,
// so that a file written in place by a slow writer is not loaded half-written:
// here its first part is a valid file that lacks two keys and billing-web's
// rate limit.
func TestWatchLoadsOnlyAFileThatStayedTheSame(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "keys.yaml", withSums(goodYAML))
	g, err := NewGuard(Config{File: path, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	third := "bk_third-key-00000000000000000000000000000000"
	full := withSums(goodYAML) + "  - name: third\n    sha256: " + KeySHA256(third) + "\n" + allowAll + "\n"
	cut := strings.Index(full, "    rate_per_s: 200")
	if _, err := ParseKeys("k.yaml", []byte(full[:cut])); err != nil {
		t.Fatalf("the first part is no valid file: %v", err)
	}
	whole := func() bool {
		b := g.Lookup("billing-web")
		return b != nil && b.rt.limiter.Load() != nil && g.Lookup("ops") != nil && g.Lookup("worker-1") != nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		t.Helper()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(full[:cut])
	g.look() // the file changed
	if !whole() {
		t.Fatal("a look loaded the first part of the file")
	}
	write(full[cut:])
	g.look() // it changed again
	if !whole() || g.Lookup("third") != nil {
		t.Fatal("a look loaded the file as it changed")
	}
	g.look() // as the last look found it: loaded
	if !whole() || g.Lookup("third") == nil {
		t.Fatal("the finished file was not loaded")
	}
	g.look() // unchanged since loaded: nothing to do
	if !whole() || g.Lookup("third") == nil {
		t.Fatal("an unchanged file changed the keys")
	}
}

func TestReloadOutsideKeysMode(t *testing.T) {
	g, err := NewGuard(Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Reload(); err != nil {
		t.Errorf("Reload in protected mode = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { g.Watch(ctx, time.Millisecond); close(done) }()
	cancel()
	<-done
}

// eventually polls cond every few milliseconds until it holds or 10 s pass: the
// contract's bound on noticing a changed keys file.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "keys.yaml", withSums(goodYAML))
	var errs counter
	var log syncBuffer
	g, err := NewGuard(Config{File: path, Logger: zerolog.New(&log), ReloadErrors: &errs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { g.Watch(ctx, 10*time.Millisecond); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// A new key appears, written by an atomic rename.
	newKey := "bk_watch-added-00000000000000000000000000000"
	writeFile(t, dir, "keys.yaml", withSums(goodYAML)+"  - name: added\n    sha256: "+KeySHA256(newKey)+"\n"+allowAll+"\n")
	eventually(t, "the added key", func() bool { return g.Lookup("added") != nil })

	// Written in place, same size: the time tells.
	inPlace := strings.Replace(withSums(goodYAML)+"  - name: added\n    sha256: "+KeySHA256(newKey)+"\n"+allowAll+"\n", "name: added", "name: addee", 1)
	if err := os.WriteFile(path, []byte(inPlace), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the renamed key", func() bool { return g.Lookup("addee") != nil })

	// The file vanishes: one error, however many looks, and every key is
	// revoked (fail closed). (A look in the middle of the write in place above
	// may have found the file half written, an error of its own: count from
	// here.)
	before := errs.n.Load()
	os.Remove(path)
	eventually(t, "the reload error", func() bool { return errs.n.Load() == before+1 })
	time.Sleep(50 * time.Millisecond) // five more looks: none may count again
	if n := errs.n.Load() - before; n != 1 {
		t.Errorf("reload errors after the file vanished = %d, want 1", n)
	}
	if g.Lookup("addee") != nil || g.Lookup("ops") != nil {
		t.Error("the keys stayed in force without their file")
	}

	// It comes back without the extra key.
	writeFile(t, dir, "keys.yaml", withSums(goodYAML))
	eventually(t, "the keys back", func() bool { return g.Lookup("ops") != nil })
	if g.Lookup("addee") != nil {
		t.Error("the removed key came back")
	}
	if _, err := os.Stat(filepath.Join(dir, "keys.yaml")); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeSurvivesReload(t *testing.T) {
	g, path, _ := keysGuard(t)
	billing := g.Lookup("billing-web")
	if !billing.AcquireWaiter() {
		t.Fatal("no waiter")
	}
	for {
		if ok, _ := billing.Allow(); !ok {
			break
		}
	}
	drained := time.Now()
	// Rotate billing-web's key, keep its name; drop ops.
	newKey := "bk_rotated-key-000000000000000000000000000000"
	content := strings.Replace(withSums(goodYAML), sumA, KeySHA256(newKey), 1)
	content = strings.Replace(content, "  - name: ops\n    sha256: "+sumB+"\n    allow:\n      - names: \"*\"\n        actions: [admin, metrics]\n", "", 1)
	writeFile(t, filepath.Dir(path), "keys.yaml", content)
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	after := g.Lookup("billing-web")
	if after == billing {
		t.Fatal("the reload kept the old Principal")
	}
	if after.Waiters() != 1 {
		t.Errorf("waiters after reload = %d, want 1", after.Waiters())
	}
	// The bucket refills at 200/s whatever happens: a loaded machine may take a
	// few of those 5 ms steps between the drain and here. A reload that refilled
	// it would let through its whole burst.
	allowed := 0
	for ok, _ := after.Allow(); ok; ok, _ = after.Allow() {
		allowed++
	}
	if accrued := int(time.Since(drained).Seconds()*200) + 1; allowed > accrued {
		t.Errorf("the reload refilled the bucket: %d requests allowed, %d tokens accrued since it was drained", allowed, accrued)
	}
	billing.ReleaseWaiter() // the request that started before the reload ends
	if after.Waiters() != 0 {
		t.Errorf("waiters after the old request ended = %d, want 0", after.Waiters())
	}
	if g.Lookup("ops") != nil {
		t.Error("ops is still there")
	}
	if _, err := g.Authenticate(request("10.1.1.1:1", "Bearer "+keyA)); err == nil {
		t.Error("the old key still works")
	}
	if p, err := g.Authenticate(request("10.1.1.1:1", "Bearer "+newKey)); err != nil || p.Name() != "billing-web" {
		t.Errorf("the new key: %v, %v", p, err)
	}
}
