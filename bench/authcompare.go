package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/client"
)

// The Batons of -auth-compare, beside sysBaton (protected mode, the default):
// one with access control off, one in keys mode. Each has a process and a key
// prefix of its own on the shared redis-server.
const (
	sysBatonOff  = "baton-off"
	sysBatonKeys = "baton-keys"
)

// authVariant is a Baton started for -auth-compare.
type authVariant struct {
	system string
	proc   *proc
	url    string
	key    string // keys mode: the key the client sends
}

// startAuthVariants starts the Batons of -auth-compare: BATON_AUTH=off, and
// BATON_AUTH_FILE with one key granted lock on every name. On error it stops
// what it started.
func (e *env) startAuthVariants(ctx context.Context) (vs []authVariant, err error) {
	defer func() {
		if err != nil {
			stopAuthVariants(vs)
			vs = nil
		}
	}()
	p, url, err := e.startBaton(ctx, "BATON_AUTH=off", "BATON_KEY_PREFIX="+sysBatonOff)
	if err != nil {
		return vs, fmt.Errorf("%s: %w", sysBatonOff, err)
	}
	vs = append(vs, authVariant{system: sysBatonOff, proc: p, url: url})

	key := auth.NewKey()
	file, err := writeKeysFile(e.dir, key)
	if err != nil {
		return vs, err
	}
	p, url, err = e.startBaton(ctx, "BATON_AUTH_FILE="+file, "BATON_KEY_PREFIX="+sysBatonKeys)
	if err != nil {
		return vs, fmt.Errorf("%s: %w", sysBatonKeys, err)
	}
	vs = append(vs, authVariant{system: sysBatonKeys, proc: p, url: url, key: key})
	if err := checkKeysMode(ctx, url, key); err != nil {
		return vs, fmt.Errorf("%s: %w", sysBatonKeys, err)
	}
	return vs, nil
}

func stopAuthVariants(vs []authVariant) {
	for _, v := range vs {
		v.proc.stop(5 * time.Second)
	}
}

// writeKeysFile writes keys.yaml, in a directory of its own under dir that
// only this user may write (Baton refuses a keys file others could change,
// and dir may be group-writable under a umask of 002), with one key, named
// bench, that may take every lock (action lock on "*"), and returns its path.
func writeKeysFile(dir, key string) (string, error) {
	grant, err := auth.ParseAllow("*=lock")
	if err != nil {
		return "", err
	}
	entry, err := auth.FileEntry("bench", auth.KeySHA256(key), []auth.Grant{grant})
	if err != nil {
		return "", err
	}
	own, err := os.MkdirTemp(dir, "keys-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(own, "keys.yaml")
	return path, os.WriteFile(path, []byte("keys:\n"+entry), 0o600)
}

// checkKeysMode makes sure the Baton at base asks for a key (a binary from
// before access control ignores BATON_AUTH_FILE and would serve everyone) and
// takes this one.
func checkKeysMode(ctx context.Context, base, key string) error {
	name := "auth-check"
	_, err := client.New(base).Acquire(ctx, name, client.AcquireOptions{})
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusUnauthorized {
		return fmt.Errorf("an acquire without a key got %v, want 401: does this Baton know BATON_AUTH_FILE?", err)
	}
	c := keyClient(base, key)
	res, err := c.Acquire(ctx, name, client.AcquireOptions{})
	if err != nil {
		return fmt.Errorf("an acquire with the key: %w", err)
	}
	_, err = c.Release(ctx, name, res.Lease.ID)
	return err
}

// keyClient is a client of the Baton at base that sends key as its Bearer key.
// client/ has no option for a key yet, so it goes in through the transport.
func keyClient(base, key string) *client.Client {
	return client.New(base, client.WithHTTPClient(benchHTTPClient(func(next http.RoundTripper) http.RoundTripper {
		return bearer{header: "Bearer " + key, next: next}
	})))
}

// bearer sets the Authorization header of every request it sends.
type bearer struct {
	header string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change its caller's request
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

// authTable compares the three modes' uncontended figures, or is "".
func (r *results) authTable() string {
	var rows [][]string
	for _, c := range []int{1, 16, 64} {
		p, off, keys := r.unc(sysBaton, c), r.unc(sysBatonOff, c), r.unc(sysBatonKeys, c)
		if p == nil || off == nil || keys == nil || p.OpsPerSec == 0 || off.OpsPerSec == 0 {
			continue
		}
		rows = append(rows, []string{fmt.Sprint(c),
			pct(keys.OpsPerSec/off.OpsPerSec - 1), pct(keys.OpsPerSec/p.OpsPerSec - 1), pct(off.OpsPerSec/p.OpsPerSec - 1),
			fmt.Sprintf("%+.1f", keys.ServerCPU-off.ServerCPU)})
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Access control: the same Baton binary in keys mode (one key, granted lock on `*`, sent as a Bearer key), " +
		"with `BATON_AUTH=off`, and in protected mode (the default; `baton`), each its own process, interleaved within each run.\n\n")
	b.WriteString(mdTable([]string{"concurrency", "keys vs off throughput", "keys vs protected throughput", "off vs protected throughput",
		"keys - off server CPU µs/pair"}, rows))
	b.WriteString("\n")
	return b.String()
}

func pct(x float64) string { return fmt.Sprintf("%+.1f%%", 100*x) }

// authGoals judges the access-control goal on this run, when -auth-compare measured it:
// keys mode within 5% of auth off in uncontended throughput.
func authGoals(r *results) []goal {
	var gs []goal
	for _, c := range []int{16, 64} {
		off, keys := r.unc(sysBatonOff, c), r.unc(sysBatonKeys, c)
		if off == nil || keys == nil || off.OpsPerSec == 0 {
			continue
		}
		x := keys.OpsPerSec/off.OpsPerSec - 1
		gs = append(gs, goal{Goal: fmt.Sprintf("uncontended c=%d: baton keys mode within 5%% of auth off (throughput)", c),
			Got:    fmt.Sprintf("%s (%.0f vs %.0f pairs/s)", pct(x), keys.OpsPerSec, off.OpsPerSec),
			Status: status(x >= -0.05)})
	}
	return gs
}
