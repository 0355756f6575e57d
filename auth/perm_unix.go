//go:build unix

package auth

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CheckFileAccess returns an error (a *FileError whose message says how to
// fix it) when someone other than the server could change the keys file at
// path: when the file, or the directory it is in (after symlinks), is
// writable by group or others, or is owned by neither uid (the server's user)
// nor root. A world-writable directory with the sticky bit (like /tmp) passes:
// nobody but the file's owner can replace the file there. A missing or
// unreadable file passes here: reading it reports that.
func CheckFileAccess(path string, uid int) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	if err := checkOwner(path, real, "the keys file", uid, false); err != nil {
		return err
	}
	return checkOwner(path, filepath.Dir(real), "the directory of the keys file", uid, true)
}

// checkOwner checks one of the keys file's path, as CheckFileAccess says.
func checkOwner(file, path, what string, uid int, dir bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	fail := func(format string, a ...any) error {
		return &FileError{File: file, Msg: fmt.Sprintf(format, a...)}
	}
	mode := fi.Mode()
	writable := mode.Perm()&0o022 != 0 && !(dir && mode&fs.ModeSticky != 0)
	if writable {
		fix := fmt.Sprintf("chmod go-w %s (0600 for the file; 0640 if a group must read it)", path)
		if dir {
			fix = fmt.Sprintf("chmod go-w %s, or keep the keys file in a directory only its owner can write", path)
		}
		return fail("%s %s is writable by group or others (mode %04o): whoever can write it can add a key with every right. Fix: %s",
			what, path, mode.Perm(), fix)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid && st.Uid != 0 {
		return fail("%s %s is owned by uid %d, neither the user this server runs as (uid %d) nor root: its owner can add a key. "+
			"Fix: chown %d %s (or chown root), or run the server as its owner", what, path, st.Uid, uid, uid, path)
	}
	return nil
}
