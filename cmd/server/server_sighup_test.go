package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
)

// keysFileFor is a keys file with one key, "app", that may lock "app:*".
func keysFileFor(key string) []byte {
	return []byte(fmt.Sprintf(`keys:
  - name: app
    sha256: %s
    allow:
      - names: "app:*"
        actions: [lock, read]
`, auth.KeySHA256(key)))
}

// rewriteUnseen writes data, of the file's own size, over path in place and
// puts its modification time back: the file watcher, which compares the size,
// time, mode and inode, cannot see the change, so only a SIGHUP reloads it.
func rewriteUnseen(t *testing.T, path string, data []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != fi.Size() {
		t.Fatalf("rewriteUnseen: %d bytes over a file of %d", len(data), fi.Size())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(fi.ModTime()) || after.Size() != fi.Size() || !os.SameFile(fi, after) {
		t.Fatal("rewriteUnseen: the file's stat changed")
	}
}

// A real SIGHUP to the server process reloads its keys file: the new key is
// accepted and the old one refused (401); a bad file on SIGHUP is logged, the
// keys still in it stay in force and a key gone from it is revoked. The file is changed so that the watcher (which reloads on
// change within 10 s) cannot see it: what reloads it is the signal.
func TestServerSIGHUPReload(t *testing.T) {
	oldKey, newKey := auth.NewKey(), auth.NewKey()
	file := writeTestFile(t, filepath.Join(t.TempDir(), "keys.yaml"), keysFileFor(oldKey))
	p, addr := startProc(t, "BATON_AUTH_FILE="+file)
	base := "http://" + addr
	c := &http.Client{Timeout: 10 * time.Second}
	status := func(key string) int {
		t.Helper()
		st, body, _, err := do(c, "GET", base+"/v1/locks/app:x", key, "")
		if err != nil {
			t.Fatalf("GET with a key: %v", err)
		}
		if st != http.StatusOK && st != http.StatusUnauthorized {
			t.Fatalf("GET with a key: %d %s", st, body)
		}
		return st
	}
	if status(oldKey) != http.StatusOK || status(newKey) != http.StatusUnauthorized {
		t.Fatal("before the reload: want the old key served and the new one refused")
	}

	hup := func() {
		t.Helper()
		if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	loaded := func() int { return strings.Count(p.logs.String(), `"keys file loaded"`) }
	before := loaded()
	rewriteUnseen(t, file, keysFileFor(newKey))
	hup()
	waitFor(t, "the keys file reloaded after SIGHUP", func() bool { return loaded() > before })
	if st := status(newKey); st != http.StatusOK {
		t.Fatalf("the new key after the reload: %d, want 200", st)
	}
	if st := status(oldKey); st != http.StatusUnauthorized {
		t.Fatalf("the old key after the reload: %d, want 401", st)
	}

	// A bad file (an unknown action) on SIGHUP: logged; the key still in it
	// stays in force.
	bad := []byte(strings.Replace(string(keysFileFor(newKey)), "[lock, read]", "[lock, reed]", 1))
	rewriteUnseen(t, file, bad)
	hup()
	waitFor(t, "the reload error in the log", func() bool {
		return strings.Contains(p.logs.String(), "keys file not reloaded")
	})
	select {
	case <-p.exited:
		t.Fatal("the server exited on a bad keys file")
	default:
	}
	if status(newKey) != http.StatusOK || status(oldKey) != http.StatusUnauthorized {
		t.Fatal("after a bad file: want the key still in it kept (the new key served, the old refused)")
	}
	// A bad file without the key's hash (a sha256 that is no hash): the key
	// is revoked all the same.
	revoked := []byte(strings.Replace(string(keysFileFor(newKey)), auth.KeySHA256(newKey), strings.Repeat("z", 64), 1))
	rewriteUnseen(t, file, revoked)
	hup()
	waitFor(t, "the revocation in the log", func() bool { return strings.Contains(p.logs.String(), `"revoked":["app"]`) })
	if st := status(newKey); st != http.StatusUnauthorized {
		t.Fatalf("a key gone from a bad file: %d, want 401", st)
	}
	if strings.Contains(p.logs.String(), newKey) || strings.Contains(p.logs.String(), oldKey) {
		t.Error("a key is in the server's log")
	}
}
