package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The clients of the rolling-restart test, all through HAProxy with plain
// net/http (no client library: its retries would hide the failures the test
// counts). Every request must get one of the answers its kind expects; a
// transport error or any other status is a failure.

// clients is the shared state of every client goroutine.
type clients struct {
	base, key string
	http      *http.Client
	rec       *recorder
	res       map[string]*resource // by lock name

	// stop asks each client to start nothing new; a client in a queue goes on
	// polling until it is granted, then releases, so the queues drain.
	stop chan struct{}
}

func newClients(base, key string, locks []string) *clients {
	c := &clients{
		base: base, key: key,
		http: &http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
			Timeout:   20 * time.Second, // far above any wait_ms used here
		},
		rec:  newRecorder(),
		res:  map[string]*resource{},
		stop: make(chan struct{}),
	}
	for _, l := range locks {
		c.res[l] = &resource{}
	}
	return c
}

func (c *clients) stopping() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// answer is a response's status and decoded JSON body.
type answer struct {
	status int
	body   map[string]any
}

func (a answer) str(k string) string {
	s, _ := a.body[k].(string)
	return s
}

func (a answer) fence() int64 {
	f, _ := a.body["fence"].(float64)
	return int64(f)
}

// call sends one request and records it under kind; ok is false (and the
// failure recorded) unless the status is one of want.
func (c *clients) call(ctx context.Context, kind, method, path, body, idemKey string, want ...int) (answer, bool) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	rq, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		panic(err)
	}
	rq.Header.Set("Authorization", "Bearer "+c.key)
	if body != "" {
		rq.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		rq.Header.Set("Idempotency-Key", idemKey)
	}
	c.rec.count(kind)
	start := time.Now()
	res, err := c.http.Do(rq)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err // without the URL, which may carry a lease or ticket id
		}
		if ctx.Err() == nil {
			c.rec.fail("%s: %v", kind, err)
		}
		return answer{}, false
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		c.rec.fail("%s: %d, reading the body: %v", kind, res.StatusCode, err)
		return answer{}, false
	}
	c.rec.took(kind, time.Since(start))
	a := answer{status: res.StatusCode}
	_ = json.Unmarshal(raw, &a.body)
	for _, w := range want {
		if a.status == w {
			return a, true
		}
	}
	c.rec.fail("%s: %d %s (request id %s)", kind, a.status, bytes.TrimSpace(raw), res.Header.Get("X-Request-Id"))
	return a, false
}

// fairUser takes lock again and again as a fair waiter: POST with fair (and,
// when idem, an Idempotency-Key), long-poll the ticket until granted, then hold,
// renew and release.
func (c *clients) fairUser(ctx context.Context, lock, who string, idem bool) {
	for !c.stopping() && ctx.Err() == nil {
		key := ""
		if idem {
			key = newKey()
		}
		sent := time.Now()
		a, ok := c.call(ctx, "fair acquire", http.MethodPost, "/v1/locks/"+lock,
			fmt.Sprintf(`{"fair": true, "ttl_ms": 10000, "owner": %q}`, who), key, http.StatusCreated, http.StatusAccepted)
		if !ok {
			continue
		}
		g := grant{sent: sent, who: who}
		if a.status == http.StatusAccepted {
			g.queued = time.Now()
			if a, ok = c.pollTicket(ctx, a.str("url")); !ok {
				continue
			}
		}
		g.got, g.fence = time.Now(), a.fence()
		c.rec.grant(lock, g)
		c.hold(ctx, lock, who, a)
	}
}

// pollTicket long-polls a ticket until it is granted: 202 "still waiting"
// (also when a replica answers it early because it is shutting down) means
// poll again, wherever HAProxy sends the next poll.
func (c *clients) pollTicket(ctx context.Context, url string) (answer, bool) {
	const wait = 2 * time.Second
	for ctx.Err() == nil {
		start := time.Now()
		a, ok := c.call(ctx, "ticket poll", http.MethodGet, fmt.Sprintf("%s?wait_ms=%d", url, wait.Milliseconds()), "", "",
			http.StatusOK, http.StatusAccepted)
		switch {
		case !ok:
			continue // the ticket outlives a failed poll by its ttl: poll again
		case a.status == http.StatusOK:
			return a, true
		case time.Since(start) < wait/2:
			c.rec.count("ticket poll answered early")
		}
	}
	return answer{}, false
}

// plainUser takes lock with non-fair long-polls: 201, or 423 when the wait
// ends (or the replica shuts down) first.
func (c *clients) plainUser(ctx context.Context, lock, who string, idem bool) {
	for !c.stopping() && ctx.Err() == nil {
		key := ""
		if idem {
			key = newKey()
		}
		sent := time.Now()
		a, ok := c.call(ctx, "plain acquire", http.MethodPost, "/v1/locks/"+lock,
			fmt.Sprintf(`{"wait_ms": 1000, "ttl_ms": 10000, "owner": %q}`, who), key, http.StatusCreated, http.StatusLocked)
		if !ok || a.status == http.StatusLocked {
			continue
		}
		c.rec.grant(lock, grant{sent: sent, who: who, got: time.Now(), fence: a.fence()})
		c.hold(ctx, lock, who, a)
	}
}

// hold uses a granted lease: the resource checks that nobody else holds it
// and that its fence is the highest yet; then a renewal, a look and the
// release, each of which must find the lease held.
func (c *clients) hold(ctx context.Context, lock, who string, lease answer) {
	url := lease.str("url")
	c.rec.lease(url)
	if err := c.res[lock].enter(who, lease.fence()); err != nil {
		c.rec.violation("%s: %v", lock, err)
	}
	c.call(ctx, "renew", http.MethodPatch, url, `{"ttl_ms": 10000}`, "", http.StatusOK)
	c.call(ctx, "lease", http.MethodGet, url, "", "", http.StatusOK)
	c.res[lock].leave(who)
	a, ok := c.call(ctx, "release", http.MethodDelete, url, "", "", http.StatusOK)
	if ok && a.body["released"] != true {
		c.rec.violation("%s: release of a hold of count 1 did not free the lock: %v", lock, a.body)
	}
}

// watcher long-polls a lock's state.
func (c *clients) watcher(ctx context.Context, lock string) {
	for !c.stopping() && ctx.Err() == nil {
		c.call(ctx, "watch", http.MethodGet, "/v1/locks/"+lock+"?wait_ms=1500", "", "", http.StatusOK)
	}
}

func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// resource stands for what a lock protects: it sees at most one holder at a
// time, and fences that only grow.
type resource struct {
	mu     sync.Mutex
	holder string
	last   int64
}

func (r *resource) enter(who string, fence int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	switch {
	case r.holder != "":
		err = fmt.Errorf("%s granted (fence %d) while %s holds it", who, fence, r.holder)
	case fence <= r.last:
		err = fmt.Errorf("%s granted fence %d, not above the last one, %d", who, fence, r.last)
	}
	r.holder, r.last = who, max(r.last, fence)
	return err
}

func (r *resource) leave(who string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holder == who {
		r.holder = ""
	}
}

// recorder collects what the clients saw.
type recorder struct {
	mu         sync.Mutex
	counts     map[string]int
	slowest    map[string]time.Duration // by kind
	failures   []string
	violations []string
	grants     map[string][]grant // by lock
	leases     []string           // lease URLs, which carry the lease id
	granted    atomic.Int64
	warm       chan struct{} // closed at the warmGrants-th grant
}

// warmGrants grants show that every kind of client is under way.
const warmGrants = 30

func newRecorder() *recorder {
	return &recorder{counts: map[string]int{}, slowest: map[string]time.Duration{}, grants: map[string][]grant{}, warm: make(chan struct{})}
}

func (r *recorder) count(kind string) {
	r.mu.Lock()
	r.counts[kind]++
	r.mu.Unlock()
}

func (r *recorder) took(kind string, d time.Duration) {
	r.mu.Lock()
	r.slowest[kind] = max(r.slowest[kind], d)
	r.mu.Unlock()
}

func (r *recorder) fail(format string, a ...any) {
	r.mu.Lock()
	r.failures = append(r.failures, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

// failed is a copy of the failures so far.
func (r *recorder) failed() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

func (r *recorder) violation(format string, a ...any) {
	r.mu.Lock()
	r.violations = append(r.violations, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

func (r *recorder) grant(lock string, g grant) {
	r.mu.Lock()
	r.grants[lock] = append(r.grants[lock], g)
	r.mu.Unlock()
	if r.granted.Add(1) == warmGrants {
		close(r.warm)
	}
}

func (r *recorder) lease(url string) {
	r.mu.Lock()
	r.leases = append(r.leases, url)
	r.mu.Unlock()
}
