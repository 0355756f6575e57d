package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batonhq/baton/client"
)

const statusUsage = `usage: baton status [--json] NAME

Shows the lock's state: free, or held (exclusive or shared) and by whom, with
each hold's fence, count and remaining time, and how many wait in its queue.
Needs the read right. Never shows a lease id.

  --json   print the server's JSON body as it is
`

const watchUsage = `usage: baton watch [--json] NAME

Prints the lock's state, then a line with the time at every change (taken,
released, expired, handed on, a shared hold more or less, the queue), until
interrupted (exit 0). While the lock is held baton long-polls the server, which
answers the moment it changes; while it is free, baton looks every
--interval. Needs the read right.

  --json             print the server's JSON body, one per line
  --interval SECONDS how often to look at a free lock (default 0.5)
`

const releaseUsage = `usage: baton release --force NAME

Releases the lock NAME whoever holds it: every hold ends, and the lock is
handed to the next in its queue. Needs the admin right. (A holder releases
its own hold by ending 'baton lock'.)
`

// statusCmd is `baton status`.
func statusCmd(args []string, g globals, stdout, stderr io.Writer) int {
	fs := commandFlags("status", &g)
	asJSON := fs.Bool("json", false, "")
	if code := parseFlags(fs, args, statusUsage, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return usageFail(stderr, "status", "give exactly one NAME", statusUsage)
	}
	c, err := g.client()
	if err != nil {
		return usageFail(stderr, "status", err.Error(), statusUsage)
	}
	st, err := c.State(context.Background(), fs.Arg(0))
	if err != nil {
		return fail(stderr, err)
	}
	if *asJSON {
		stdout.Write(withNewline(st.Raw))
		return exitOK
	}
	fmt.Fprintln(stdout, summary(st))
	for _, h := range st.Holds {
		owner := h.Owner
		if owner == "" {
			owner = "-"
		}
		fmt.Fprintf(stdout, "  fence %d  count %d  %s left  %s\n", h.Fence, h.Count, secs(h.TTL), owner)
	}
	return exitOK
}

// summary is the lock's state in one line.
func summary(st *client.LockState) string {
	var b strings.Builder
	b.WriteString(st.Name + ": ")
	if !st.Held {
		b.WriteString("free")
		if st.Fence > 0 {
			fmt.Fprintf(&b, " (last fence %d)", st.Fence)
		}
	} else {
		mode := st.Mode
		if mode == "" {
			mode = "exclusive"
		}
		if mode == "shared" {
			mode = fmt.Sprintf("shared, %d %s", st.Holders, plural(st.Holders, "hold", "holds"))
			if st.Limit > 0 {
				mode += fmt.Sprintf(" of at most %d", st.Limit)
			}
		}
		fmt.Fprintf(&b, "held (%s)", mode)
		if st.Owner != "" {
			fmt.Fprintf(&b, " by %s", st.Owner)
		}
		fmt.Fprintf(&b, ", fence %d, %s left", st.Fence, secs(st.TTL))
	}
	if st.Waiters > 0 || st.Held {
		fmt.Fprintf(&b, ", %d waiting", st.Waiters)
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func withNewline(b []byte) []byte {
	b = bytes.TrimRight(b, "\n")
	return append(b, '\n')
}

// watchCmd is `baton watch`.
func watchCmd(args []string, g globals, stdout, stderr io.Writer) int {
	fs := commandFlags("watch", &g)
	asJSON := fs.Bool("json", false, "")
	interval := fs.Float64("interval", 0.5, "")
	if code := parseFlags(fs, args, watchUsage, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return usageFail(stderr, "watch", "give exactly one NAME", watchUsage)
	}
	if *interval <= 0 {
		return usageFail(stderr, "watch", "--interval must be above 0", watchUsage)
	}
	c, err := g.client()
	if err != nil {
		return usageFail(stderr, "watch", err.Error(), watchUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	w := watcher{c: c, name: fs.Arg(0), every: seconds(*interval), out: stdout, errs: stderr, json: *asJSON}
	err = w.run(ctx)
	if err == nil || ctx.Err() != nil {
		return exitOK
	}
	return fail(stderr, err)
}

// watchWait is how long one watch request waits at most.
const watchWait = 30 * time.Second

type watcher struct {
	c     *client.Client
	name  string
	every time.Duration
	out   io.Writer
	errs  io.Writer
	json  bool
}

// run prints the state, then every change, until ctx is done (nil) or a
// request is refused (its error). Trouble that passes (no answer, a proxy's
// 502 or 504, a 503 store-unavailable or overloaded) is waited out, with
// backoff, and never shorter than the answer's Retry-After.
func (w *watcher) run(ctx context.Context) error {
	var last *client.LockState
	failing := false
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		var st *client.LockState
		var err error
		switch {
		case last == nil:
			st, err = w.c.State(ctx, w.name)
		case last.Held:
			fence := last.Fence
			st, err = w.c.Watch(ctx, w.name, watchWait, &fence)
		default:
			if !sleep(ctx, w.every) {
				return nil
			}
			st, err = w.c.State(ctx, w.name)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !retryable(err) {
				return err
			}
			if !failing {
				fmt.Fprintf(w.errs, "baton: %v; trying again\n", err)
				failing = true
			}
			if !sleep(ctx, max(backoff, retryAfter(err))) {
				return nil
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		if failing {
			fmt.Fprintln(w.errs, "baton: reaching Baton again")
			failing, backoff = false, 100*time.Millisecond
		}
		if last == nil || changed(last, st) {
			w.print(st)
		}
		last = st
	}
	return nil
}

func (w *watcher) print(st *client.LockState) {
	if w.json {
		w.out.Write(withNewline(st.Raw))
		return
	}
	fmt.Fprintf(w.out, "%s %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), summary(st))
}

// changed reports whether b says something a says not, other than the time left.
func changed(a, b *client.LockState) bool {
	if a.Held != b.Held || a.Mode != b.Mode || a.Holders != b.Holders || a.Fence != b.Fence || a.Owner != b.Owner ||
		a.Count != b.Count || a.Limit != b.Limit || a.Waiters != b.Waiters || len(a.Holds) != len(b.Holds) {
		return true
	}
	for i := range a.Holds {
		if a.Holds[i].Fence != b.Holds[i].Fence || a.Holds[i].Count != b.Holds[i].Count {
			return true
		}
	}
	return false
}

// retryable reports whether a failed look at the lock may succeed later.
func retryable(err error) bool {
	var p *client.Problem
	if errors.As(err, &p) {
		return p.Status >= 500 || p.Status == 429 || p.Status == 408
	}
	return !errors.Is(err, client.ErrUnexpectedResponse)
}

// retryAfter is the Retry-After of err's problem answer, or 0.
func retryAfter(err error) time.Duration {
	var p *client.Problem
	if errors.As(err, &p) {
		return p.RetryAfter
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// releaseCmd is `baton release --force`.
func releaseCmd(args []string, g globals, stdout, stderr io.Writer) int {
	fs := commandFlags("release", &g)
	force := fs.Bool("force", false, "")
	if code := parseFlags(fs, args, releaseUsage, stdout, stderr); code >= 0 {
		return code
	}
	if fs.NArg() != 1 {
		return usageFail(stderr, "release", "give exactly one NAME", releaseUsage)
	}
	if !*force {
		return usageFail(stderr, "release", "releasing a lock whoever holds it needs --force", releaseUsage)
	}
	c, err := g.client()
	if err != nil {
		return usageFail(stderr, "release", err.Error(), releaseUsage)
	}
	name := fs.Arg(0)
	released, err := c.ForceRelease(context.Background(), name)
	if err != nil {
		return fail(stderr, err)
	}
	if released {
		fmt.Fprintf(stdout, "%s: released by force\n", name)
	} else {
		fmt.Fprintf(stdout, "%s: was not held\n", name)
	}
	return exitOK
}
