// Package deploy tests haproxy.cfg, HAProxy in front of several Baton
// replicas, by restarting each replica in turn behind it while clients work;
// it runs the file as shipped. deploy/ has no code of its own: this test
// package, and deploy_test (deploy_test.go), which checks the Prometheus and
// Grafana files, live next to what they test.
package deploy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/internal/batontest"
	"github.com/batonhq/baton/internal/redistest"
)

const (
	replicas  = 3
	rotations = 3
	// shutdownDelay is Baton's default BATON_SHUTDOWN_DELAY, spelled out because
	// batontest sets it to 0 for tests that need no load balancer.
	shutdownDelay = time.Second
)

// Three Batons on one Redis behind HAProxy (haproxy.cfg as shipped), clients
// working through it, and each Baton restarted in turn, rotations times: SIGTERM,
// its exit, a start on the same port, HAProxy seeing it up again. No request
// may fail, no ticket may be overtaken, no two clients may hold a lock at
// once, and fences only grow.
func TestRollingRestart(t *testing.T) {
	rds := redistest.Start(t)
	key := auth.NewKey()
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	// Keys mode, as haproxy.cfg says a deployment behind a proxy must use: the
	// same file on every replica.
	if err := os.WriteFile(keys, []byte(fmt.Sprintf(`keys:
  - name: deploy-test
    sha256: %s
    allow:
      - names: "deploy-*"
        actions: [lock, read]
`, auth.KeySHA256(key))), 0o600); err != nil {
		t.Fatal(err)
	}
	var batons []*batontest.Server
	var addrs []string
	for range replicas {
		b := batontest.Start(t, batontest.Options{Redis: rds, Env: []string{
			"BATON_AUTH_FILE=" + keys, "BATON_SHUTDOWN_DELAY=" + shutdownDelay.String(),
		}})
		batons = append(batons, b)
		addrs = append(addrs, b.Addr)
	}
	hp := startHAProxy(t, addrs)
	for i := range batons {
		hp.await(t, server(i), isUp)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("HAProxy log (tail):\n%s", tail(hp.Log(), 60))
			for i, b := range batons {
				t.Logf("%s log (tail):\n%s", server(i), tail(b.Logs(), 30))
			}
		}
	})

	fair := []string{"deploy-fair-0", "deploy-fair-1"}
	plain := "deploy-plain"
	c := newClients(hp.URL, key, append([]string{plain}, fair...))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the Batons and HAProxy stop
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for _, l := range fair {
		for u := range 4 {
			who := fmt.Sprintf("%s/fair-%d", l, u)
			run(func() { c.fairUser(ctx, l, who, u%2 == 1) })
		}
		run(func() { c.plainUser(ctx, l, l+"/plain", false) }) // must never jump the queue
	}
	for u := range 3 {
		run(func() { c.plainUser(ctx, plain, fmt.Sprintf("%s/plain-%d", plain, u), u == 0) })
	}
	run(func() { c.watcher(ctx, plain) })

	select {
	case <-c.rec.warm:
	case <-ctx.Done():
		t.Fatalf("no %d grants: %q", warmGrants, c.rec.failed())
	}
	start := time.Now()
	for r := range rotations {
		for i, b := range batons {
			restart(t, hp, b, server(i), r)
		}
	}
	rolled := time.Since(start)
	close(c.stop)
	wg.Wait()
	if ctx.Err() != nil {
		t.Errorf("the clients did not finish within the test's 90 s")
	}
	report(t, c, hp, rolled)
	checkAfter(t, c, hp, append([]string{plain}, fair...))
	checkNoneUp(t, c, hp, batons)
}

func server(i int) string { return fmt.Sprintf("baton%d", i+1) }

// restart stops b the way a rolling restart does (SIGTERM, and its exit),
// while checking that HAProxy takes it out of rotation before its
// shutdown delay ends, then starts it again on the same port and waits until
// HAProxy has it back.
func restart(t *testing.T, hp *haproxy, b *batontest.Server, name string, rotation int) {
	t.Helper()
	sent := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() { b.Stop(); stopped <- time.Since(sent) }() // SIGTERM, then waits for the exit
	down := hp.await(t, name, isDown)
	exited := <-stopped
	if down >= shutdownDelay {
		t.Errorf("%s: HAProxy took it out %v after the SIGTERM, not within BATON_SHUTDOWN_DELAY (%v)",
			name, down, shutdownDelay)
	}
	if err := b.Restart(); err != nil {
		t.Fatalf("%s: start again: %v", name, err)
	}
	up := hp.await(t, name, isUp)
	t.Logf("rotation %d, %s: out of rotation %v after SIGTERM, exited after %v, back in rotation %v after its start",
		rotation+1, name, down.Round(time.Millisecond), exited.Round(time.Millisecond), up.Round(time.Millisecond))
}

// report logs what the clients did and what HAProxy counted, and fails on
// any failed request or broken promise.
func report(t *testing.T, c *clients, hp *haproxy, rolled time.Duration) {
	t.Helper()
	r := c.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	var kinds []string
	for k, n := range r.counts {
		if k != "ticket poll answered early" {
			total += n
		}
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	grants, judged := 0, 0
	for lock, gs := range r.grants {
		grants += len(gs)
		bad, n := orderViolations(lock, gs)
		r.violations = append(r.violations, bad...)
		judged += n
	}
	t.Logf("%d requests through HAProxy during %d rotations (%v): %d grants; %s",
		total, rotations, rolled.Round(time.Millisecond), grants, strings.Join(kinds, ", "))
	t.Logf("queue order: %d requests judged against a ticket that was queued before they were sent and still waiting", judged)
	var slow []string
	for _, k := range []string{"fair acquire", "renew", "lease", "release"} { // the ones that never wait
		slow = append(slow, fmt.Sprintf("%s %v", k, r.slowest[k].Round(time.Millisecond)))
	}
	t.Logf("slowest answers to requests that never wait: %s", strings.Join(slow, ", "))
	if st, err := hp.stats(); err == nil {
		be, fe := st["batons/BACKEND"], st["baton/FRONTEND"]
		t.Logf("HAProxy: %d requests, %d 5xx answered to clients; backend: %d retries, %d redispatches, "+
			"%d connection errors, %d response errors",
			fe.int("req_tot"), fe.int("hrsp_5xx"), be.int("wretr"), be.int("wredis"), be.int("econ"), be.int("eresp"))
		if n := fe.int("hrsp_5xx"); n > 0 {
			t.Errorf("HAProxy answered %d requests with a 5xx", n)
		}
	}
	if n := len(r.failures); n > 0 {
		t.Errorf("%d failed requests, the first ones:\n%s", n, strings.Join(r.failures[:min(n, 20)], "\n"))
	}
	if n := len(r.violations); n > 0 {
		t.Errorf("%d violations, the first ones:\n%s", n, strings.Join(r.violations[:min(n, 20)], "\n"))
	}
	if grants < warmGrants*rotations {
		t.Errorf("only %d grants: the clients hardly worked", grants)
	}
}

// idInPath is a lease, ticket or session id in a logged path: the log must
// show "-" in its place.
var idInPath = regexp.MustCompile(`/(leases|tickets|sessions)/[^-\s]`)

// checkAfter checks what is left once the clients have finished: no lock held
// or queued, and no id in HAProxy's log.
func checkAfter(t *testing.T, c *clients, hp *haproxy, locks []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range locks {
		a, ok := c.call(ctx, "state", http.MethodGet, "/v1/locks/"+l, "", "", http.StatusOK)
		if ok && (a.body["held"] != false || a.body["waiters"] != float64(0)) {
			t.Errorf("%s after the clients finished: %v", l, a.body)
		}
	}
	log := hp.Log()
	if !strings.Contains(log, "/leases/-") || !strings.Contains(log, "/tickets/-") {
		t.Errorf("HAProxy's log has no request lines with redacted ids:\n%s", tail(log, 20))
	}
	if m := idInPath.FindString(log); m != "" {
		t.Errorf("HAProxy's log shows an id in a path: %q", m)
	}
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	for i, u := range c.rec.leases {
		if i%(len(c.rec.leases)/20+1) != 0 {
			continue // a sample: the log is megabytes
		}
		if id := u[strings.LastIndex(u, "/")+1:]; id != "" && strings.Contains(log, id) {
			t.Errorf("HAProxy's log holds a lease id")
			break
		}
	}
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// checkNoneUp stops every Baton and checks HAProxy's answer when none is up:
// a problem+json 503 with Retry-After.
func checkNoneUp(t *testing.T, c *clients, hp *haproxy, batons []*batontest.Server) {
	t.Helper()
	var wg sync.WaitGroup
	for _, b := range batons {
		wg.Add(1)
		go func() { defer wg.Done(); b.Stop() }()
	}
	wg.Wait()
	for i := range batons {
		hp.await(t, server(i), isDown)
	}
	rq, _ := http.NewRequest(http.MethodGet, hp.URL+"/v1/locks/deploy-plain", nil)
	res, err := c.http.Do(rq)
	if err != nil {
		t.Fatalf("no replica up: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" ||
		res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("no replica up: %d, Retry-After %q, Content-Type %q; want 503, 1, application/problem+json",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Content-Type"))
	}
}
