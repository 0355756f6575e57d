package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/client"
)

// Access control. Every Baton this program starts runs in keys mode
// (BATON_AUTH_FILE), and every request it makes carries a key: a few
// principals with different grants, as tenants of one deployment would have.
// A legitimate client is never refused, so every 401 or 403 is a violation.
//
// The keys are made afresh for each topology (auth.NewKey) and kept in this
// process; the file, which holds only their SHA-256, goes to the scenario's
// working directory.

// The principals, and what each may do. scope is the workload's lock names'
// prefix (the scenario's name), so that the workers' grants cover exactly
// their locks.
const (
	// runnerPrincipal is the runner itself: recovery probes, canaries, the
	// fault injectors' own requests, force releases and /metrics.
	runnerPrincipal = "runner"
	// appA and appB are the workload's two tenants; workers alternate between
	// them. Leases belong to the key that made them, so each worker keeps its
	// own key for everything it does.
	appA = "app-a"
	appB = "app-b"
	// watchPrincipal is the watchers': they only read.
	watchPrincipal = "watch"
)

// grantsOf is each principal's allow entries, as GLOB=ACTION,ACTION (keygen's
// --allow), for a workload whose lock names start with scope.
func grantsOf(scope string) map[string][]string {
	return map[string][]string{
		runnerPrincipal: {"*=admin,metrics"},
		appA:            {scope + "-*=lock,read"},
		appB:            {scope + "-*=lock", "*=read"},
		watchPrincipal:  {"*=read"},
	}
}

// principals lists them in a fixed order.
var principals = []string{runnerPrincipal, appA, appB, watchPrincipal}

// writeKeys makes a key for each principal, writes the keys file (their
// SHA-256 and grants) to dir, and returns its path and the keys by principal.
func writeKeys(dir, scope string) (string, map[string]string, error) {
	if scope == "" {
		scope = "chaos"
	}
	keys := map[string]string{}
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, name := range principals {
		var grants []auth.Grant
		for _, a := range grantsOf(scope)[name] {
			g, err := auth.ParseAllow(a)
			if err != nil {
				return "", nil, fmt.Errorf("grant %s of %s: %w", a, name, err)
			}
			grants = append(grants, g)
		}
		key := auth.NewKey()
		entry, err := auth.FileEntry(name, auth.KeySHA256(key), grants)
		if err != nil {
			return "", nil, fmt.Errorf("key of %s: %w", name, err)
		}
		b.WriteString(entry)
		keys[name] = key
	}
	own, err := os.MkdirTemp(dir, "keys-") // only this user may write it, whatever the umask: Baton refuses a keys file others could change
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(own, "keys.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", nil, err
	}
	return path, keys, nil
}

// refused reports whether err is a 401 or 403: a legitimate client turned away.
func refused(err error) bool {
	var p *client.Problem
	return errors.As(err, &p) && (p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden)
}

// refusals counts the 401s and 403s the runner's requests got. Those of
// requests in the history are answers outside the contract there already;
// the others (a watcher's state reads, the recovery probes) are violations
// counted here (outside).
type refusals struct {
	all, outside atomic.Int64
	last         atomic.Value // string: the latest, for the details
}

// note counts err if it is a refusal; inHistory says whether its request is
// recorded in the history.
func (r *refusals) note(err error, inHistory bool) {
	if !refused(err) {
		return
	}
	r.all.Add(1)
	if !inHistory {
		r.outside.Add(1)
	}
	r.last.Store(err.Error())
}

// String describes the refusals for the summary, with the latest.
func (r *refusals) String() string {
	n := r.all.Load()
	if n == 0 {
		return "0 refused (401/403)"
	}
	last, _ := r.last.Load().(string)
	return fmt.Sprintf("%d refused (401/403; %d outside the history), the latest: %s", n, r.outside.Load(), last)
}
