package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/client"
)

// The waiters scenario needs more client connections than one process may open
// (RLIMIT_NOFILE, which an unprivileged process cannot raise past its hard
// limit), so helper processes hold them: this same program, run with
// helperFlag. Each helper opens its share of long-polls from its own loopback
// source address (so that no address runs short of ephemeral ports), prints
// "written" once every request is sent, "refused <kind>" for any the server
// answered with a problem (its type, e.g. overloaded), "fail <error>" for any
// that ends early otherwise, and exits when its stdin closes.
const (
	helperFlag   = "-waiter-helper"
	perHelper    = 10000 // connections per helper: well inside any open-file limit worth running at
	openInFlight = 256   // requests being dialled and written at once, per helper: keeps the listen backlog from overflowing
)

// waiterHelper is the helper process's main.
func waiterHelper(args []string) error {
	fs := flag.NewFlagSet("waiter-helper", flag.ContinueOnError)
	base := fs.String("base", "", "Baton's base URL")
	prefix := fs.String("prefix", "", "lock name prefix")
	from := fs.Int("from", 0, "first waiter index")
	n := fs.Int("n", 0, "waiters")
	source := fs.String("source", "127.0.0.1", "local address to connect from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	go func() { // the parent closes stdin (or dies): done
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: -1, LocalAddr: &net.TCPAddr{IP: net.ParseIP(*source)}}
	tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConns: *n, MaxIdleConnsPerHost: *n}
	c := client.New(*base, client.WithHTTPClient(&http.Client{Transport: tr}))
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	sem := make(chan struct{}, openInFlight)
	for i := *from; i < *from+*n; i++ {
		sem <- struct{}{}
		go func() {
			var once sync.Once
			free := func() { once.Do(func() { <-sem }) }
			defer free()
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(httptrace.WroteRequestInfo) { free() },
			})
			res, err := c.Acquire(ctx, waiterName(*prefix, i), client.AcquireOptions{TTL: time.Minute, Wait: 10 * time.Minute})
			var p *client.Problem
			switch {
			case err == nil && res.Lease != nil:
				err = fmt.Errorf("waiter %d granted", i)
			case errors.As(err, &p):
				say("refused %s", problemKind(p))
				return
			}
			say("fail %s", strings.ReplaceAll(fmt.Sprint(err), "\n", " "))
		}()
	}
	for range openInFlight {
		sem <- struct{}{}
	}
	say("written")
	select {}
}

// problemKind is a problem answer's kind (its type's last segment), or
// "status-N" when it has no type.
func problemKind(p *client.Problem) string {
	if i := strings.LastIndex(p.Type, "/problems/"); i >= 0 {
		return p.Type[i+len("/problems/"):]
	}
	return "status-" + strconv.Itoa(p.Status)
}

// helper is a running helper process, seen from the parent.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu      sync.Mutex
	fails   int
	first   string
	refused map[string]int // opens answered with a problem, by its kind
}

// startHelpers starts enough helpers to hold n long-polls on base.
func startHelpers(base, prefix string, n int) ([]*helper, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var hs []*helper
	for i, from := 0, 0; from < n; i++ {
		k := min(perHelper, n-from)
		cmd := exec.Command(exe, helperFlag, "-base", base, "-prefix", prefix,
			"-from", strconv.Itoa(from), "-n", strconv.Itoa(k), "-source", fmt.Sprintf("127.0.0.%d", 1+i))
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err1 := cmd.StdinPipe()
		stdout, err2 := cmd.StdoutPipe()
		if err := errors.Join(err1, err2); err != nil {
			return hs, err
		}
		if err := cmd.Start(); err != nil {
			return hs, fmt.Errorf("start waiter helper: %w", err)
		}
		h := &helper{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		go h.read(stdout)
		hs = append(hs, h)
		from += k
	}
	return hs, nil
}

func (h *helper) read(r io.Reader) {
	defer close(h.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if kind, ok := strings.CutPrefix(sc.Text(), "refused "); ok {
			h.mu.Lock()
			if h.refused == nil {
				h.refused = map[string]int{}
			}
			h.refused[kind]++
			h.mu.Unlock()
		}
		if msg, ok := strings.CutPrefix(sc.Text(), "fail "); ok {
			h.mu.Lock()
			if h.fails == 0 {
				h.first = msg
			}
			h.fails++
			h.mu.Unlock()
		}
	}
	_ = h.cmd.Wait()
}

// helpersFailed reports the long-polls that ended early, and helpers that died.
func helpersFailed(hs []*helper) error {
	var errs []error
	for i, h := range hs {
		h.mu.Lock()
		if h.fails > 0 {
			errs = append(errs, fmt.Errorf("helper %d: %d waiters ended early; first: %s", i, h.fails, h.first))
		}
		h.mu.Unlock()
		select {
		case <-h.done:
			errs = append(errs, fmt.Errorf("helper %d exited: %v", i, h.cmd.ProcessState))
		default:
		}
	}
	return errors.Join(errs...)
}

// helpersRefused is the opens the server answered with a problem, by its
// kind, over every helper.
func helpersRefused(hs []*helper) map[string]int {
	all := map[string]int{}
	for _, h := range hs {
		h.mu.Lock()
		for k, n := range h.refused {
			all[k] += n
		}
		h.mu.Unlock()
	}
	return all
}

// stopHelpers closes the helpers' stdin, which ends them and drops all their
// connections at once; SIGKILL after a grace period.
func stopHelpers(hs []*helper) {
	for _, h := range hs {
		_ = h.stdin.Close()
	}
	for _, h := range hs {
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.done
		}
	}
}
