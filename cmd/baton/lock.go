package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/client"
)

const lockUsage = `usage: baton lock [-s] [--limit N] [-n | -w SECONDS] [--ttl SECONDS] [--fair]
                  [--owner LABEL] [-E N] NAME -- COMMAND [ARGS...]
       baton lock [flags] NAME -c 'SHELL COMMAND'

Runs COMMAND while holding the lock NAME, as flock(1) does with a file, and
exits with COMMAND's status. The lock is taken before COMMAND starts, renewed
in the background at a third of its ttl while COMMAND runs, and released when
COMMAND exits. Without -n or -w, baton waits for the lock as long as it takes.

COMMAND gets, besides baton's own environment:
  BATON_LOCK_HELD=true
  BATON_LOCK_NAME   the lock's name
  BATON_FENCE       the hold's fencing token: pass it to what the lock protects
  BATON_LEASE_URL   the hold's lease URL (a secret: whoever has it, and a key,
                    may release the hold)

  -s, --shared              a shared hold: shared holds coexist, an exclusive one
                            (the default, -x) excludes all others
  -x, --exclusive           an exclusive hold (the default)
      --limit N             with -s: at most N shared holds at once (a semaphore)
  -n, --nonblock            fail at once if the lock is held
  -w, --wait SECONDS        wait at most SECONDS for the lock (fractions allowed)
      --ttl SECONDS         the lease's length (default: the server's, 30 s); it is
                            renewed every third of it
      --fair                wait in the lock's first-come, first-served queue
      --owner LABEL         the label others see in 'baton status' (default:
                            HOST:PID)
  -E, --conflict-exit-code N  the exit status when the lock is held (default 1)
  -c, --command STRING      run STRING with /bin/sh -c instead of COMMAND
      --kill-after SECONDS  when the lock is lost, SIGKILL COMMAND this long after
                            SIGTERM (default 10)
  -v, --verbose             say why COMMAND did not run when the lock is held

When the hold is lost while COMMAND runs (a renewal finds that it ran out or
was taken by force, or Baton stays unreachable until the lease ends), COMMAND
gets SIGTERM, SIGKILL --kill-after later, and baton exits 5. SIGINT, SIGTERM,
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to baton are passed on to COMMAND; the
lock is released once COMMAND exits. (Ctrl-C at a terminal reaches COMMAND
directly as well, since both are in the terminal's foreground.) A signal while
baton waits for the lock stops the wait: baton exits 128+N and leaves the
queue.

Exit status: COMMAND's (128+N if signal N ended it); 1 (or -E) if the lock
is held; 2 usage; 3 Baton unreachable or failing; 4 key refused; 5 lock lost
while COMMAND ran; 126 COMMAND could not run; 127 COMMAND not found.

Examples:
  baton lock -n nightly-report -- ./report.sh          # skip if it is running
  baton lock -w 30 --ttl 60 db-migrate -- make migrate  # wait up to 30 s
  baton lock -s --limit 4 exports -- ./export.sh        # at most 4 at once
`

// forwarded are the signals baton passes on to COMMAND.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

type lockArgs struct {
	name      string
	argv      []string
	opts      client.LockOptions
	conflict  int
	killAfter time.Duration
	verbose   bool
}

// lockCmd is `baton lock`.
func lockCmd(args []string, g globals, stdout, stderr io.Writer) int {
	la, code := parseLock(args, &g, stdout, stderr)
	if code >= 0 {
		return code
	}
	c, err := g.client()
	if err != nil {
		return usageFail(stderr, "lock", err.Error(), lockUsage)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	h, sig, err := acquire(c, la, sigs)
	switch {
	case sig != nil:
		return 128 + signum(sig)
	case errors.Is(err, client.ErrLockHeld):
		if la.verbose {
			fmt.Fprintf(stderr, "baton: %s; not running COMMAND\n", heldBy(la.name, err))
		}
		return la.conflict
	case err != nil:
		return fail(stderr, err)
	}
	return runHolding(c, h, la, sigs, stdout, stderr)
}

// parseLock reads lock's arguments: [flags] NAME -- COMMAND [ARGS...], or
// [flags] NAME COMMAND [ARGS...] (flock's form, flags before NAME), or
// [flags] NAME -c STRING. It returns an exit status when done, else -1.
func parseLock(args []string, g *globals, stdout, stderr io.Writer) (lockArgs, int) {
	fs := commandFlags("lock", g)
	shared := fs.BoolP("shared", "s", false, "")
	fs.BoolP("exclusive", "x", false, "")
	limit := fs.Int("limit", 0, "")
	nonblock := fs.BoolP("nonblock", "n", false, "")
	wait := fs.Float64P("wait", "w", -1, "")
	ttl := fs.Float64("ttl", 0, "")
	fair := fs.Bool("fair", false, "")
	owner := fs.String("owner", "", "")
	conflict := fs.IntP("conflict-exit-code", "E", exitConflict, "")
	command := fs.StringP("command", "c", "", "")
	killAfter := fs.Float64("kill-after", 10, "")
	verbose := fs.BoolP("verbose", "v", false, "")

	// Flags go before "--" (anywhere among them); without "--", flags go before
	// NAME and everything after NAME is COMMAND, as with flock.
	var rest []string
	dash := -1
	for i, a := range args {
		if a == "--" {
			dash = i
			break
		}
	}
	if dash >= 0 {
		rest = args[dash+1:]
		args = args[:dash]
	} else {
		fs.SetInterspersed(false)
	}
	if code := parseFlags(fs, args, lockUsage, stdout, stderr); code >= 0 {
		return lockArgs{}, code
	}
	pos := fs.Args()
	bad := func(msg string) (lockArgs, int) { return lockArgs{}, usageFail(stderr, "lock", msg, lockUsage) }
	if dash >= 0 && len(pos) != 1 {
		return bad("give one NAME before --")
	}
	if len(pos) == 0 {
		return bad("give the lock's NAME")
	}
	la := lockArgs{name: pos[0], argv: append(pos[1:], rest...), conflict: *conflict, verbose: *verbose,
		killAfter: seconds(*killAfter)}
	if dash < 0 && len(la.argv) > 0 && *command == "" {
		// flock's NAME -c STRING, with -c after NAME.
		switch a := la.argv[0]; {
		case (a == "-c" || a == "--command") && len(la.argv) == 2:
			*command, la.argv = la.argv[1], nil
		case strings.HasPrefix(a, "--command=") && len(la.argv) == 1:
			*command, la.argv = strings.TrimPrefix(a, "--command="), nil
		}
	}
	switch {
	case *command != "" && len(la.argv) > 0:
		return bad("give either -c STRING or COMMAND, not both")
	case *command != "":
		la.argv = []string{"/bin/sh", "-c", *command}
	case len(la.argv) == 0:
		return bad("give a COMMAND to run (after --)")
	case *nonblock && fs.Changed("wait"):
		return bad("-n and -w exclude each other")
	case *limit < 0 || (*limit > 0 && !*shared):
		return bad("--limit N needs -s (it counts shared holds)")
	case *conflict < 0 || *conflict > 255:
		return bad("-E must be 0 to 255")
	case fs.Changed("wait") && *wait < 0, *ttl < 0, *killAfter < 0:
		return bad("durations must not be negative")
	case *shared && fs.Changed("exclusive"):
		return bad("-s and -x exclude each other")
	}
	la.opts = client.LockOptions{TTL: seconds(*ttl), Fair: *fair, Shared: *shared, Limit: *limit,
		Owner: *owner, Wait: client.WaitForever}
	switch {
	case *nonblock:
		la.opts.Wait = 0
	case fs.Changed("wait"):
		la.opts.Wait = seconds(*wait)
	}
	if la.opts.Owner == "" {
		host, _ := os.Hostname()
		la.opts.Owner = host + ":" + strconv.Itoa(os.Getpid())
		if len(la.opts.Owner) > 128 {
			la.opts.Owner = la.opts.Owner[len(la.opts.Owner)-128:]
		}
	}
	return la, -1
}

// heldBy says who holds the lock, from a lock-held error.
func heldBy(name string, err error) string {
	var p *client.Problem
	if !errors.As(err, &p) {
		return err.Error() // a fair wait that ran out says so itself
	}
	who := ""
	if p.Owner != "" {
		who = " by " + p.Owner
	}
	return fmt.Sprintf("%q is held%s for %s more", name, who, secs(p.TTL))
}

// acquire takes the lock, unless a signal comes first: then it gives up (the
// fair queue's ticket is deleted) and returns the signal.
func acquire(c *client.Client, la lockArgs, sigs <-chan os.Signal) (*client.Hold, os.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		h   *client.Hold
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := c.Lock(ctx, la.name, la.opts)
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		return r.h, nil, r.err
	case sig := <-sigs:
		cancel()
		if r := <-done; r.err == nil { // granted as the signal came
			uctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			defer stop()
			_ = r.h.Unlock(uctx)
		}
		return nil, sig, nil
	}
}

// runHolding runs COMMAND while h is held and returns baton's exit status.
func runHolding(c *client.Client, h *client.Hold, la lockArgs, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(la.argv[0], la.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"BATON_LOCK_HELD=true",
		"BATON_LOCK_NAME="+la.name,
		"BATON_FENCE="+strconv.FormatInt(h.Fence(), 10),
		"BATON_LEASE_URL="+c.BaseURL()+h.Lease().URL)
	if err := cmd.Start(); err != nil {
		unlock(h, stderr)
		fmt.Fprintf(stderr, "baton: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()

	lost := h.Lost()
	var kill <-chan time.Time
	wasLost := false
	for {
		select {
		case <-waited:
			status := exitStatus(cmd.ProcessState)
			if wasLost {
				return exitLost
			}
			if err := unlock(h, stderr); errors.Is(err, client.ErrLost) {
				return exitLost // it ran out before COMMAND was done with it
			}
			return status
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-lost:
			lost, wasLost = nil, true
			fmt.Fprintf(stderr, "baton: %v; sending SIGTERM to COMMAND\n", h.Err())
			_ = cmd.Process.Signal(syscall.SIGTERM)
			kill = time.After(la.killAfter)
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, "baton: COMMAND still runs %v after SIGTERM; sending SIGKILL\n", la.killAfter)
			_ = cmd.Process.Kill()
		}
	}
}

// unlock releases h after COMMAND, saying so when that fails.
func unlock(h *client.Hold, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := h.Unlock(ctx)
	switch {
	case errors.Is(err, client.ErrLost):
		fmt.Fprintf(stderr, "baton: %v\n", err)
	case err != nil:
		fmt.Fprintf(stderr, "baton: %v (the lock is freed when its lease runs out)\n", err)
	}
	return err
}

// exitStatus is a finished COMMAND's status as a shell reports it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signum(s os.Signal) int {
	n, _ := s.(syscall.Signal) // every signal baton handles is one
	return int(n)
}
