package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// A renewal answered 503 with Retry-After (store-unavailable, or overloaded)
// is tried again within the lease, and the hold lives on.
func TestRenewalRidesOut503(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	for _, kind := range []string{"store-unavailable", "overloaded"} {
		t.Run(kind, func(t *testing.T) {
			const ttl = 3 * time.Second
			name := "client:503:" + kind
			h := r.lock(name, client.LockOptions{TTL: ttl})
			r.Proxy.Problem(http.StatusServiceUnavailable, kind, 2, leasePath(h))
			r.stillHeld(name, h.Fence(), ttl+500*time.Millisecond)
			notLost(t, h)
			if n := r.count(leasePath(h)); n < 3 {
				t.Fatalf("%d requests on the lease, want two refused renewals and a good one", n)
			}
		})
	}
}

// A POST answered 503 overloaded is sent again, as after store-unavailable:
// with the same Idempotency-Key and body, once its Retry-After has passed.
func TestPostRetriedAfterOverloaded(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	rec := &recorder{}
	c := client.New(r.Proxy.URL, client.WithAPIKey(r.Keys.Full), client.WithHTTPClient(&http.Client{Transport: rec}))
	r.Proxy.Problem(http.StatusServiceUnavailable, "overloaded", 1, "/v1/locks/client:overloaded")
	start := time.Now()
	h, err := c.Lock(r.ctx(), "client:overloaded", client.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(r.ctx())
	if took := time.Since(start); took < time.Second {
		t.Fatalf("granted %v after an overloaded answer with Retry-After: 1, want at least 1s", took)
	}
	ps := rec.posts()
	if len(ps) != 2 || ps[0].idemKey == "" || ps[0].idemKey != ps[1].idemKey || ps[0].body != ps[1].body {
		t.Fatalf("posts %+v, want one retry with the same key and body", ps)
	}

	// Past the retry time, the answer is the overloaded problem.
	short := client.New(r.Proxy.URL, client.WithAPIKey(r.Keys.Full), client.WithRetryMaxTime(1500*time.Millisecond))
	r.Proxy.Problem(http.StatusServiceUnavailable, "overloaded", 10, "/v1/locks/client:overloaded2")
	_, err = short.Lock(r.ctx(), "client:overloaded2", client.LockOptions{TTL: 10 * time.Second})
	var p *client.Problem
	if !errors.Is(err, client.ErrOverloaded) || !errors.As(err, &p) || p.RetryAfter != time.Second {
		t.Fatalf("got %v, want the overloaded problem with its Retry-After", err)
	}
	r.Proxy.Reset()
}

// A short outage (shorter than the lease) is ridden out; a long one loses the
// hold when the lease runs out, not before.
func TestServerDownDuringHold(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	t.Cleanup(func() { r.Proxy.Down(false) })

	// The lease outlives the outage and the renewal after it by seconds,
	// however loaded the machine.
	short := r.lock("client:short", client.LockOptions{TTL: 6 * time.Second})
	r.Proxy.Down(true)
	time.Sleep(time.Second) // the outage
	r.Proxy.Down(false)
	r.stillHeld("client:short", short.Fence(), 2*time.Second)
	notLost(t, short)

	const ttl = 900 * time.Millisecond
	long := r.lock("client:long", client.LockOptions{TTL: ttl})
	r.Proxy.Down(true)
	start := time.Now()
	took := awaitLost(t, long, 5*time.Second)
	if took < ttl/2 {
		t.Fatalf("lost after %v of a %v lease, want when the lease runs out", took, ttl)
	}
	if err := long.Err(); !errors.Is(err, client.ErrLost) || !strings.Contains(err.Error(), "ran out") {
		t.Fatalf("Err %v", err)
	}
	r.Proxy.Down(false)
	if st := r.state("client:long"); st.Held {
		t.Fatalf("%v after the lease: %+v", time.Since(start), st)
	}
}

// A hold lives through a restart of the Baton process (its Redis keeps it).
func TestServerRestart(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	c := client.New(r.URL, client.WithAPIKey(r.Keys.Full))
	h, err := c.Lock(r.ctx(), "client:restart", client.LockOptions{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	r.stillHeld("client:restart", h.Fence(), 2*time.Second)
	notLost(t, h)
	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
}

// With nobody listening, Lock retries for the retry time, then says so.
func TestServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	c := client.New(url, client.WithAPIKey("bk_unused"), client.WithRetryMaxTime(500*time.Millisecond))
	start := time.Now()
	_, err = c.Lock(context.Background(), "client:down", client.LockOptions{})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), `acquire "client:down": after `) {
		t.Fatalf("got %v, want connection refused after retries", err)
	}
	var p *client.Problem
	if errors.As(err, &p) {
		t.Fatalf("got a problem %v", p)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v, want about the retry time (500ms), not the default %v", took, client.DefaultRetryMaxTime)
	}
}

// A POST answered 503 with Retry-After is sent again with the same
// Idempotency-Key and body; every POST has a key of its own.
func TestPostRetriedWithSameKey(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	rec := &recorder{}
	c := client.New(r.Proxy.URL, client.WithAPIKey(r.Keys.Full), client.WithHTTPClient(&http.Client{Transport: rec}))
	r.Proxy.Status(http.StatusServiceUnavailable, 1, "/v1/locks/client:retry")
	h, err := c.Lock(r.ctx(), "client:retry", client.LockOptions{TTL: 10 * time.Second, Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unlock(r.ctx())
	r.Proxy.Status(http.StatusBadGateway, 1, "/v1/sessions")
	s, err := c.NewSession(r.ctx(), client.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(r.ctx())
	ps := rec.posts()
	if len(ps) != 4 {
		t.Fatalf("posts %+v, want 2 per call", ps)
	}
	for i := 0; i < 4; i += 2 {
		a, b := ps[i], ps[i+1]
		if a.idemKey == "" || a.idemKey != b.idemKey || a.body != b.body || a.path != b.path {
			t.Fatalf("retry %+v of %+v: want the same key and body", b, a)
		}
		if a.auth != "Bearer "+r.Keys.Full {
			t.Fatalf("Authorization %q", a.auth)
		}
	}
	if ps[0].idemKey == ps[2].idemKey {
		t.Fatal("two calls sent the same Idempotency-Key")
	}
	if st := r.state("client:retry"); st.Holders != 1 || st.Fence != h.Fence() {
		t.Fatalf("state %+v", st)
	}
}

// A POST whose answer is cut after Baton acted is retried with the same key
// and gets what the first made: one hold, one ticket, one session.
func TestCutAnswerLeavesOneHold(t *testing.T) {
	r := startRig(t)
	r.Proxy.Cut(1, "/v1/locks/client:cut")
	h := r.lock("client:cut", client.LockOptions{TTL: 10 * time.Second})
	if st := r.state("client:cut"); st.Holders != 1 || st.Fence != h.Fence() {
		t.Fatalf("state %+v, hold fence %d: want one hold", st, h.Fence())
	}
	if n := r.count("/v1/locks/client:cut"); n != 2 {
		t.Fatalf("%d requests, want the cut one and its retry", n)
	}

	// In the fair queue: one ticket, then one hold.
	r.Proxy.Cut(1, "/v1/locks/client:cut")
	got := make(chan *client.Hold, 1)
	go func() {
		h, err := r.C.Lock(r.ctx(), "client:cut", client.LockOptions{Fair: true, Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	eventually(t, "a ticket", func() bool { return r.count("/v1/locks/client:cut/tickets") > 0 })
	if st := r.state("client:cut"); st.Waiters != 1 {
		t.Fatalf("state %+v, want one ticket", st)
	}
	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
	h2 := <-got
	if h2 == nil {
		t.FailNow()
	}
	defer h2.Unlock(r.ctx())
	if st := r.state("client:cut"); st.Holders != 1 || st.Waiters != 0 || st.Fence != h2.Fence() {
		t.Fatalf("state %+v", st)
	}

	r.Proxy.Cut(1, "/v1/sessions")
	s, err := r.C.NewSession(r.ctx(), client.SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(r.ctx())
	keys, err := r.Redis.Client(t).Keys(r.ctx(), "bt:s:{*}").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("session keys %q, %v: want one session", keys, err)
	}
}

// A release whose answer is cut is retried; its "not held" then means done.
func TestUnlockAnswerCut(t *testing.T) {
	r := startRig(t)
	h := r.lock("client:unlockcut", client.LockOptions{})
	r.Proxy.Cut(1, leasePath(h))
	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if st := r.state("client:unlockcut"); st.Held {
		t.Fatalf("state %+v", st)
	}
	if n := r.count(leasePath(h)); n != 2 {
		t.Fatalf("%d releases, want the cut one and its retry", n)
	}
}

// A ticket poll cut by a proxy's timeout (504) is made again, and the ticket
// is granted when its turn comes.
func TestFairPollCutByProxyTimeout(t *testing.T) {
	r := startRig(t)
	holder, err := r.Admin.Acquire(r.ctx(), "client:poll", client.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.Proxy.Timeout(200*time.Millisecond, "/v1/locks/client:poll/tickets")
	got := make(chan *client.Hold, 1)
	go func() {
		h, err := r.C.Lock(r.ctx(), "client:poll", client.LockOptions{Fair: true, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	eventually(t, "polls cut and made again", func() bool { return r.count("/v1/locks/client:poll/tickets") >= 3 })
	if st := r.state("client:poll"); st.Waiters != 1 {
		t.Fatalf("state %+v, want the ticket alive", st)
	}
	if _, err := r.Admin.Release(r.ctx(), "client:poll", holder.Lease.ID); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil {
		t.FailNow()
	}
	if h.Fence() <= holder.Lease.Fence {
		t.Fatalf("fence %d", h.Fence())
	}
	r.Proxy.Reset()
	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
}

// A fair Lock that gives up (its wait ran out, or its context ended) deletes
// its ticket, so the queue moves on at once.
func TestFairGiveUpLeavesQueue(t *testing.T) {
	r := startRig(t)
	if _, err := r.Admin.Acquire(r.ctx(), "client:giveup", client.AcquireOptions{TTL: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, err := r.C.Lock(r.ctx(), "client:giveup", client.LockOptions{Fair: true, Wait: 300 * time.Millisecond})
	if !errors.Is(err, client.ErrLockHeld) || !strings.Contains(err.Error(), "left the fair queue") {
		t.Fatalf("got %v, want ErrLockHeld", err)
	}
	if st := r.state("client:giveup"); st.Waiters != 0 {
		t.Fatalf("state %+v, want the ticket gone", st)
	}

	ctx, cancel := context.WithTimeout(r.ctx(), 300*time.Millisecond)
	defer cancel()
	_, err = r.C.Lock(ctx, "client:giveup", client.LockOptions{Fair: true, Wait: client.WaitForever})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
	if st := r.state("client:giveup"); st.Waiters != 0 {
		t.Fatalf("state %+v, want the ticket gone", st)
	}
}

// Acquire sends one request unless given an Idempotency-Key: without one, a
// retry could take a second hold.
func TestAcquireRetriesOnlyWithAKey(t *testing.T) {
	r := startRig(t)
	rec := &recorder{}
	c := client.New(r.Proxy.URL, client.WithAPIKey(r.Keys.Full), client.WithHTTPClient(&http.Client{Transport: rec}))
	r.Proxy.Cut(1, "/v1/locks/client:raw")
	if _, err := c.Acquire(r.ctx(), "client:raw", client.AcquireOptions{}); err == nil {
		t.Fatal("a cut answer without a key: no error")
	}
	if ps := rec.posts(); len(ps) != 1 || ps[0].idemKey != "" {
		t.Fatalf("posts %+v, want one, without a key", ps)
	}
	if st := r.state("client:raw"); st.Holders != 1 {
		t.Fatalf("state %+v: the cut request took the lock", st)
	}
	key := client.NewIdempotencyKey()
	r.Proxy.Cut(1, "/v1/locks/client:raw2")
	res, err := c.Acquire(r.ctx(), "client:raw2", client.AcquireOptions{IdempotencyKey: key})
	if err != nil || !res.Replayed {
		t.Fatalf("with a key: %+v, %v; want the replayed lease", res, err)
	}
	if ps := rec.posts(); len(ps) != 3 || ps[1].idemKey != key || ps[2].idemKey != key {
		t.Fatalf("posts %+v", ps)
	}
	if st := r.state("client:raw2"); st.Holders != 1 || st.Fence != res.Lease.Fence {
		t.Fatalf("state %+v", st)
	}
}
