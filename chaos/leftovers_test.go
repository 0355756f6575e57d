package main

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// TestNothingIsLeftAfterTheGuard checks, on a real Baton process, what the
// chaos key check expects of every scenario (issue 16; README, Guarantees:
// "Nothing stays behind"): after a name's last hold and ticket end, its key is
// gone BATON_FENCE_GUARD later (not kept for the rest of a grant released at
// once, nor for a fair waiter's ticket that hung up), and nothing else is left.
func TestNothingIsLeftAfterTheGuard(t *testing.T) {
	dir := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The build takes what the machine's load makes it take (the go test
	// timeout bounds it); the minute below is the test's own.
	bin, err := buildBaton(context.Background(), root, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const guard = time.Second
	top, err := startTopology(dir, bin, topoOptions{batons: 1, env: []string{"BATON_FENCE_GUARD=" + guard.String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(top.stop)
	c := top.cls[0]

	// A long lease, released at once.
	l, err := c.Acquire(ctx, "long", client.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "long", l.Lease.ID); err != nil {
		t.Fatal(err)
	}
	// A fair waiter that hangs up while it waits.
	h, err := c.Acquire(ctx, "hung", client.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, hangUp := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(wctx, "hung", client.AcquireOptions{TTL: time.Second, Fair: true, Wait: 5 * time.Second})
		waited <- err
	}()
	// It hangs up once Baton counts it waiting (a gauge: only visible by asking).
	for b := top.batons[0]; len(waited) == 0 && b.gauge(ctx, "baton_waiters") < 1; {
		time.Sleep(10 * time.Millisecond)
	}
	hangUp()
	t.Logf("hung-up fair wait: %v", <-waited)
	if _, err := c.Release(ctx, "hung", h.Lease.ID); err != nil {
		t.Fatal(err)
	}

	finished := time.Now()
	left, err := awaitKeys(ctx, top.rdb, guard+guardSlack, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%v after the last hold and ticket ended (BATON_FENCE_GUARD %v), Redis still holds %v",
			time.Since(finished).Round(time.Millisecond), guard, left)
	}
}
