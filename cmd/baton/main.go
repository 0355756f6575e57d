// Command baton is Baton's command-line tool. For now it makes API keys:
//
//	baton keygen NAME [--allow 'GLOB=ACTION,ACTION']...
//
// Exit status: 0 on success, 2 on a usage error (an unknown command, a bad flag,
// name or grant). Later commands (lock, status, watch, release) keep 1 for a lock
// held by someone else, as flock(1) does.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK    = 0
	exitUsage = 2
)

const usage = `usage: baton COMMAND [ARGS]

Commands:
  keygen NAME [--allow 'GLOB=ACTION,ACTION']...
        make an API key named NAME, print it once, and print its keys-file entry

Run 'baton COMMAND --help' for a command's details.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process's exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "keygen":
		return keygen(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}
