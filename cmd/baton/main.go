// Command baton is Baton's command-line tool: it runs a command while holding
// a lock, like flock(1) and `consul lock`, shows and watches locks, releases
// them by force, makes API keys, and checks keys files.
//
//	baton [--url URL] [--key KEY] COMMAND [ARGS]
//	baton lock [-s] [--limit N] [-n | -w SECONDS] [--ttl SECONDS] [--fair] [--owner LABEL]
//	           [-E N] NAME -- COMMAND [ARGS...]
//	baton status [--json] NAME
//	baton watch [--json] NAME
//	baton release --force NAME
//	baton keygen NAME [--allow 'GLOB=ACTION,ACTION']...
//	baton keys check [--uid UID] FILE
//
// Exit status: see usage below, or `baton --help`.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/client"
)

// Exit statuses. `baton lock` otherwise exits with COMMAND's own status.
const (
	exitOK       = 0
	exitConflict = 1 // the lock is held by someone else (lock -n, or -w ran out); lock -E changes it
	exitUsage    = 2 // a bad command, flag or argument, or a request the server calls invalid
	exitServer   = 3 // Baton could not be reached, or failed (no answer, 5xx, ...)
	exitDenied   = 4 // the API key was refused (401) or may not do this (403)
	exitLost     = 5 // lock: the hold was lost while COMMAND ran; COMMAND was terminated
	// Like env(1), nohup(1) and timeout(1): COMMAND could not be run.
	exitCannotRun = 126
	exitNotFound  = 127
)

const usage = `usage: baton [--url URL] [--key KEY] COMMAND [ARGS]

Commands:
  lock [-s] [--limit N] [-n | -w SECONDS] [--ttl SECONDS] [--fair] [--owner LABEL]
       [-E N] NAME -- COMMAND [ARGS...]
        run COMMAND while holding the lock NAME, renewing it in the background,
        as flock(1) does with a file
  status [--json] NAME
        show the lock's state
  watch [--json] NAME
        print the lock's state, then every change, until interrupted
  release --force NAME
        release the lock whoever holds it (needs the admin right)
  keygen NAME [--allow 'GLOB=ACTION,ACTION']...
        make an API key named NAME, print it once, and print its keys-file entry
  keys check [--uid UID] FILE
        check a keys file before it is deployed: its errors, with their lines,
        and whether others could write it (which the server refuses)

Global flags (before or after COMMAND):
  --url URL              the Baton server (default: $BATON_URL, else http://localhost:8080)
  --key KEY              the API key (default: $BATON_API_KEY; prefer the variable:
                         a flag shows in the process list)
  --retry-max-time SECS  how long to retry a request whose answer was lost or that
                         found Baton unreachable or unavailable (default 10)

Exit status:
  0    success; lock: COMMAND's own status (128+N when a signal N ended it)
  1    lock: the lock is held by someone else (-n, or -w ran out); COMMAND did not run
       (-E N exits N instead)
  2    usage error, or a request the server found invalid (a bad lock name, a ttl
       out of its bounds)
  3    Baton could not be reached, or failed (after retrying for --retry-max-time)
  4    the API key was refused (401), or may not do this to this lock (403)
  5    lock: the lock was lost while COMMAND ran (a renewal found it taken by force
       or run out); COMMAND was sent SIGTERM, and SIGKILL 10 s later
  126  lock: COMMAND could not be run; 127: COMMAND was not found
  128+N  lock: interrupted by signal N while waiting for the lock

Run 'baton COMMAND --help' for a command's details.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process's exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var g globals
	fs := pflag.NewFlagSet("baton", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SetInterspersed(false)
	g.register(fs)
	help := fs.BoolP("help", "h", false, "")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "baton: %v\n\n%s", err, usage)
		return exitUsage
	}
	args = fs.Args()
	if *help || (len(args) > 0 && args[0] == "help") {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "lock":
		return lockCmd(args[1:], g, stdout, stderr)
	case "status":
		return statusCmd(args[1:], g, stdout, stderr)
	case "watch":
		return watchCmd(args[1:], g, stdout, stderr)
	case "release":
		return releaseCmd(args[1:], g, stdout, stderr)
	case "keygen":
		return keygen(args[1:], stdout, stderr)
	case "keys":
		return keysCmd(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// globals are the flags every command that talks to Baton takes.
type globals struct {
	url, key string
	retry    float64 // seconds
}

// register adds the global flags to fs, with their current values as defaults,
// so that they may be given before the command or after it.
func (g *globals) register(fs *pflag.FlagSet) {
	if g.retry == 0 {
		g.retry = client.DefaultRetryMaxTime.Seconds()
	}
	fs.StringVar(&g.url, "url", g.url, "")
	fs.StringVar(&g.key, "key", g.key, "")
	fs.Float64Var(&g.retry, "retry-max-time", g.retry, "")
}

// client is the client the global flags describe.
func (g *globals) client() (*client.Client, error) {
	if g.retry < 0 {
		return nil, errors.New("--retry-max-time must not be negative")
	}
	opts := []client.Option{client.WithRetryMaxTime(seconds(g.retry)), client.WithUserAgent("baton-cli/1")}
	if g.key != "" {
		opts = append(opts, client.WithAPIKey(g.key))
	}
	return client.New(g.url, opts...), nil
}

// seconds converts a flag's seconds to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// fail prints err and returns the exit status for it: 4 for a refused key, 2
// for an invalid request, 3 for the rest.
func fail(stderr io.Writer, err error) int {
	code := exitServer
	hint := ""
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		code, hint = exitDenied, " (give a key with BATON_API_KEY or --key)"
	case errors.Is(err, client.ErrForbidden):
		code = exitDenied
	case errors.Is(err, client.ErrInvalid):
		code = exitUsage
	}
	fmt.Fprintf(stderr, "baton: %v%s\n", err, hint)
	return code
}

// commandFlags makes a command's flag set, with the global flags, that prints
// nothing itself.
func commandFlags(name string, g *globals) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolP("help", "h", false, "")
	g.register(fs)
	return fs
}

// parseFlags parses args into fs; it returns an exit status when the command
// is done (help, or a usage error), else -1.
func parseFlags(fs *pflag.FlagSet, args []string, cmdUsage string, stdout, stderr io.Writer) int {
	err := fs.Parse(args)
	if err == nil {
		if h, _ := fs.GetBool("help"); h {
			err = pflag.ErrHelp
		}
	}
	switch {
	case err == nil:
		return -1
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(stdout, cmdUsage)
		return exitOK
	default:
		return usageFail(stderr, fs.Name(), err.Error(), cmdUsage)
	}
}

func usageFail(stderr io.Writer, cmd, msg, cmdUsage string) int {
	fmt.Fprintf(stderr, "baton %s: %s\n\n%s", cmd, msg, cmdUsage)
	return exitUsage
}
