//go:build unix

package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// A keys file that someone besides the server's user (or root) can write is
// refused, at start and on reload, with a message saying how to fix it: the
// file or its directory writable by group or others, or owned by another
// user. An appended key in such a file never works; the keys still in it do.
func TestKeysFileWritableByOthersIsRefused(t *testing.T) {
	tests := []struct {
		name     string
		fileMode os.FileMode
		dirMode  os.FileMode
		want     string // "" when accepted
	}{
		{name: "0600", fileMode: 0o600, dirMode: 0o700},
		{name: "0644 in 0755", fileMode: 0o644, dirMode: 0o755},
		{name: "0640", fileMode: 0o640, dirMode: 0o750},
		{name: "0666", fileMode: 0o666, dirMode: 0o700, want: "is writable by group or others (mode 0666)"},
		{name: "0620", fileMode: 0o620, dirMode: 0o700, want: "is writable by group or others (mode 0620)"},
		{name: "0602", fileMode: 0o602, dirMode: 0o700, want: "is writable by group or others (mode 0602)"},
		{name: "a 0777 directory", fileMode: 0o600, dirMode: 0o777, want: "the directory of the keys file"},
		{name: "a 0770 directory", fileMode: 0o600, dirMode: 0o770, want: "the directory of the keys file"},
		{name: "a sticky 1777 directory", fileMode: 0o600, dirMode: 0o777 | os.ModeSticky},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "conf")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := writeFile(t, dir, "keys.yaml", withSums(goodYAML))
			chmod(t, path, tt.fileMode)
			chmod(t, dir, tt.dirMode)
			_, err := NewGuard(Config{File: path, Logger: zerolog.Nop()})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("NewGuard: %v, want it accepted", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "chmod go-w")):
				t.Errorf("NewGuard: %v, want an error with %q that says how to fix it", err, tt.want)
			}
		})
	}
}

// A keys file made writable by others later (0666, say) is not reloaded: an
// admin key appended to it never works, while the keys still in it do.
func TestReloadRefusesAFileMadeWritableByOthers(t *testing.T) {
	g, path, log := keysGuard(t)
	intruder := "bk_intruder-key-000000000000000000000000000000"
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("  - name: intruder\n    sha256: " + KeySHA256(intruder) + "\n    allow:\n      - names: \"*\"\n        actions: [admin]\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	chmod(t, path, 0o666)
	if err := g.Reload(); err == nil || !strings.Contains(err.Error(), "mode 0666") {
		t.Fatalf("Reload of a 0666 file: %v, want it refused", err)
	}
	if authAs(g, intruder) != "" {
		t.Error("the key appended to a 0666 file works")
	}
	if authAs(g, keyA) != "billing-web" || authAs(g, keyB) != "ops" {
		t.Error("the keys still in the file were revoked")
	}
	if !strings.Contains(log.String(), "chmod go-w") {
		t.Errorf("the log does not say how to fix it:\n%s", log.String())
	}
	chmod(t, path, 0o600)
	if err := g.Reload(); err != nil || authAs(g, intruder) != "intruder" {
		t.Errorf("once fixed the file loads (here with the appended key): %v", err)
	}
}

// A keys file owned by a user other than the server's and root is refused:
// its owner could add a key.
func TestKeysFileOwnedByAnotherUserIsRefused(t *testing.T) {
	path := writeFile(t, t.TempDir(), "keys.yaml", withSums(goodYAML))
	server := os.Geteuid() + 1 // the file's owner is not the server's user...
	if os.Geteuid() == 0 {     // ...nor root: as root, give it away
		if err := os.Chown(path, 4242, -1); err != nil {
			t.Fatal(err)
		}
		server = 0
	}
	err := CheckFileAccess(path, server)
	if err == nil || !strings.Contains(err.Error(), "is owned by uid") || !strings.Contains(err.Error(), "chown") {
		t.Errorf("CheckFileAccess of another user's file: %v, want it refused with how to fix it", err)
	}
	if err := CheckFileAccess(filepath.Join(t.TempDir(), "missing.yaml"), server); err != nil {
		t.Errorf("a missing file: %v (reading it says so)", err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
