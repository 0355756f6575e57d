//go:build unix

package main

import "syscall"

// openFileLimit is the process's soft limit on open files (RLIMIT_NOFILE), as
// Go's runtime left it (raised to the hard limit at start), and whether it is
// known.
func openFileLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == ^uint64(0) {
		return 0, false
	}
	return lim.Cur, true
}
