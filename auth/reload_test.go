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

func TestReloadKeepsKeysOnBadFile(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "keys.yaml", withSums(goodYAML))
	var log syncBuffer
	var errs counter
	g, err := NewGuard(Config{File: path, Logger: zerolog.New(&log), ReloadErrors: &errs})
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(withSums(goodYAML), "[lock, read]", "[lock, reed]", 1)
	bad = strings.Replace(bad, "name: ops", "name: ops\n    key: "+keyB, 1) // a key pasted where it must not be
	tests := []struct {
		name    string
		give    func()
		wantLog string
	}{
		{"invalid", func() { writeFile(t, dir, "keys.yaml", bad) }, "keys.yaml:7: key \\\"billing-web\\\": allow[0]: unknown action \\\"reed\\\""},
		{"empty", func() { writeFile(t, dir, "keys.yaml", "") }, "the file is empty"},
		{"directory", func() {
			os.Remove(path)
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is a directory"},
		{"missing", func() { os.Remove(path) }, "no such file"},
	}
	for i, tt := range tests {
		tt.give()
		if err := g.Reload(); err == nil {
			t.Fatalf("%s: Reload() = nil", tt.name)
		}
		if got := errs.n.Load(); got != int64(i+1) {
			t.Errorf("%s: reload errors = %d, want %d", tt.name, got, i+1)
		}
		if !strings.Contains(log.String(), tt.wantLog) {
			t.Errorf("%s: the log lacks %q:\n%s", tt.name, tt.wantLog, log.String())
		}
		if p, err := g.Authenticate(request("10.0.0.1:1", "Bearer "+keyA)); err != nil || p.Name() != "billing-web" {
			t.Errorf("%s: the previous keys are not in force: %v, %v", tt.name, p, err)
		}
	}
	if strings.Contains(log.String(), keyB) || strings.Contains(log.String(), keyA) {
		t.Errorf("a key is in the log:\n%s", log.String())
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

	// The file vanishes: one error, however many looks, and the keys stay.
	// (A look in the middle of the write in place above may have found the
	// file half written, an error of its own: count from here.)
	before := errs.n.Load()
	os.Remove(path)
	eventually(t, "the reload error", func() bool { return errs.n.Load() == before+1 })
	time.Sleep(50 * time.Millisecond) // five more looks: none may count again
	if n := errs.n.Load() - before; n != 1 {
		t.Errorf("reload errors after the file vanished = %d, want 1", n)
	}
	if g.Lookup("addee") == nil {
		t.Error("the keys were dropped with the file")
	}

	// It comes back without the extra key.
	writeFile(t, dir, "keys.yaml", withSums(goodYAML))
	eventually(t, "the removed key", func() bool { return g.Lookup("addee") == nil })
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
