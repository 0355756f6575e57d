package main

// Reproductions of Baton defects the chaos runs found, for the lead to fix
// (the runner does not touch store/ or lua/). Each fails on today's Baton, so
// each runs only with BATON_REPRO=1.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"

	"github.com/batonhq/baton/client"
)

// TestRetriedAcquireDoesNotGrantAgainAfterRelease reproduces a defect the
// net-stranded scenario found (an orphan hold on net-stranded-race-1, full run
// of seed 1795555019798919276): the store retries an acquire whose connection
// timed out, the retry grants and is answered, the client releases; then the
// first copy, held up in the network, reaches Redis and grants the lock again
// under the same lease hash, for the whole ttl, to a client that believes it has
// released it. Here the first copy is held by stranding Baton's connections
// (strandToxic) and let go after the release.
//
// It fails on today's Baton, so it only runs with BATON_REPRO=1:
//
//	BATON_REPRO=1 go test ./chaos -run TestRetriedAcquireDoesNotGrantAgainAfterRelease -v
func TestRetriedAcquireDoesNotGrantAgainAfterRelease(t *testing.T) {
	if os.Getenv("BATON_REPRO") == "" {
		t.Skip("reproduces a Baton defect (issue 17); set BATON_REPRO=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildBaton(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	toxics.Register("strand", new(strandToxic))
	top, err := startTopology(dir, bin, topoOptions{batons: 1, proxied: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(top.stop)
	c := top.cls[0]
	if _, err := c.State(ctx, "x"); err != nil { // the pool has its connection
		t.Fatal(err)
	}
	if err := top.proxy.add("strand", map[string]any{"until": time.Now().Add(50 * time.Millisecond).UnixNano()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the strand window: new connections go through
	start := time.Now()
	res, err := c.Acquire(ctx, "x", client.AcquireOptions{TTL: time.Minute, Owner: "me"})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	t.Logf("granted after %v (the first copy timed out, the retry granted), fence %d", time.Since(start).Round(time.Millisecond), res.Lease.Fence)
	rel, err := c.Release(ctx, "x", res.Lease.ID)
	if err != nil || !rel.Released {
		t.Fatalf("release: %+v, %v", rel, err)
	}
	if err := top.proxy.remove("strand"); err != nil { // the first copy goes on to Redis
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		l, err := c.Lease(ctx, "x", res.Lease.ID)
		switch {
		case err == nil:
			t.Fatalf("the lease released a moment ago is held again: fence %d, %v left, owner %q", l.Fence, l.TTL, l.Owner)
		case !errors.Is(err, client.ErrLeaseNotHeld):
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the late copy is only visible by asking
	}
}

// TestUndoOfAFailedPollLeavesALaterClaimAlone reproduces a defect net-reset
// found (lock net-reset-6 had no legal order; full run of seed
// 1795556957367860917): a ticket poll fails on one Baton process without a
// definite answer, so that process queues an unpoll, which retries until Redis
// answers; meanwhile the ticket is granted, the client claims the grant with a
// poll on another process and renews it; then the queued unpoll reaches Redis,
// finds the lock held under the ticket's lease with more than the ticket ttl
// left, and cuts the client's renewed lease down to the ticket ttl, unclaimed.
// The lease runs out long before the end its holder was told, and the lock is
// granted to someone else: two holders. Here process B reaches Redis through a
// proxy that holds its connections (holdToxic) while the rest happens on A.
//
// It fails on today's Baton, so it only runs with BATON_REPRO=1:
//
//	BATON_REPRO=1 go test ./chaos -run TestUndoOfAFailedPollLeavesALaterClaimAlone -v
func TestUndoOfAFailedPollLeavesALaterClaimAlone(t *testing.T) {
	if os.Getenv("BATON_REPRO") == "" {
		t.Skip("reproduces a Baton defect (issue 17); set BATON_REPRO=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildBaton(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := startTopology(dir, bin, topoOptions{batons: 2, proxied: true}) // BATON_TICKET_TTL: 10s, outliving B's failed poll
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(top.stop)
	// A talks to Redis directly; B through the proxy.
	a := top.batons[0]
	a.stop()
	a.env = append(a.env, "BATON_REDIS_URL="+top.redis.URL())
	if err := a.start(); err != nil {
		t.Fatal(err)
	}
	onA, onB := top.cls[0], top.cls[1]

	holder, err := onA.Acquire(ctx, "y", client.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := onA.Acquire(ctx, "y", client.AcquireOptions{TTL: time.Minute, Fair: true, Owner: "waiter"})
	if err != nil || queued.Ticket == nil {
		t.Fatalf("fair acquire: %+v, %v", queued, err)
	}
	ticketID := queued.Ticket.ID
	if err := top.proxy.add("hold", nil); err != nil { // B's calls to Redis now go nowhere
		t.Fatal(err)
	}
	if _, err := onB.Poll(ctx, "y", ticketID, time.Second); err == nil {
		t.Fatal("a poll on B answered while B cannot reach Redis")
	}
	// B has given up on that poll (503) and queued its undo, which waits for Redis.
	if _, err := onA.Release(ctx, "y", holder.Lease.ID); err != nil { // hands the lock to the ticket
		t.Fatal(err)
	}
	got, err := onA.Poll(ctx, "y", ticketID, time.Second)
	if err != nil || got.Lease == nil {
		t.Fatalf("poll on A: %+v, %v", got, err)
	}
	l, err := onA.Renew(ctx, "y", got.Lease.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claimed on A and renewed: fence %d, %v left", l.Fence, l.TTL)
	if err := top.proxy.remove("hold"); err != nil { // B's undo reaches Redis
		t.Fatal(err)
	}
	renewed := time.Now()
	time.Sleep(11 * time.Second) // past the ticket ttl: an end the lease must not have had
	if l, err := onA.Lease(ctx, "y", got.Lease.ID); err != nil {
		msg := fmt.Sprintf("the lease renewed for a minute %v ago is gone (%v)", time.Since(renewed).Round(time.Millisecond), err)
		if other, err := onA.Acquire(ctx, "y", client.AcquireOptions{TTL: time.Minute}); err == nil && other.Lease != nil {
			msg += fmt.Sprintf(", and a new acquire is granted (fence %d) while its holder believes it holds", other.Lease.Fence)
		}
		t.Fatal(msg)
	} else {
		t.Logf("still held: %v left", l.TTL)
	}
}

// TestCancelAfterACrashFreesTheTicketsGrant reproduces a defect baton-kill
// found (an orphan hold on baton-kill-0, 4.46 s of its 4.48 s lease; full run
// of seed 1795555019798919276): a ticket's poll is in flight on a Baton process
// when that process is killed (SIGKILL), so Redis still marks the ticket as
// polled until the poll's wait would have ended; a release then hands the lock
// to the ticket at its full ttl, as to a waiter about to answer, but no process
// will. The client, told of the crash by a broken connection, gives up and
// cancels its ticket, as the README advises ("DELETE its ticket, so the queue
// moves on at once"): 410 ticket-gone, and the lock stays held under the
// ticket's lease for the whole ttl, known to nobody.
//
// It fails on today's Baton, so it only runs with BATON_REPRO=1:
//
//	BATON_REPRO=1 go test ./chaos -run TestCancelAfterACrashFreesTheTicketsGrant -v
func TestCancelAfterACrashFreesTheTicketsGrant(t *testing.T) {
	if os.Getenv("BATON_REPRO") == "" {
		t.Skip("reproduces a Baton defect (issue 17); set BATON_REPRO=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildBaton(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := startTopology(dir, bin, topoOptions{batons: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(top.stop)
	onA, onB := top.cls[0], top.cls[1]
	holder, err := onA.Acquire(ctx, "z", client.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := onA.Acquire(ctx, "z", client.AcquireOptions{TTL: time.Minute, Fair: true, Owner: "waiter"})
	if err != nil || queued.Ticket == nil {
		t.Fatalf("fair acquire: %+v, %v", queued, err)
	}
	polled := make(chan error, 1)
	go func() { _, err := onB.Poll(ctx, "z", queued.Ticket.ID, 10*time.Second); polled <- err }()
	time.Sleep(300 * time.Millisecond) // the poll reaches B and Redis; nothing outside shows it has
	top.batons[1].kill()
	t.Logf("poll on the killed process: %v", <-polled)
	if _, err := onA.Release(ctx, "z", holder.Lease.ID); err != nil {
		t.Fatal(err)
	}
	err = onA.Cancel(ctx, "z", queued.Ticket.ID)
	t.Logf("cancel: %v", err)
	st, err := onA.State(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	if st.Held {
		t.Fatalf("after its only waiter cancelled, the lock is held by %q with %v left, under a lease nobody was told of", st.Owner, st.TTL)
	}
}

// TestNothingIsLeftAfterTheGuard reproduces the keys every chaos scenario
// finds left in Redis after BATON_FENCE_GUARD (issue 16; README, Guarantees:
// "After a name's last hold and ticket end, Redis keeps only its fence key, for
// BATON_FENCE_GUARD; then nothing of the name"): a fence key kept for the ttl of
// a grant that was released at once, and the tombstone of a fair waiter whose
// client hung up, kept 30 s.
//
// It fails on today's Baton, so it only runs with BATON_REPRO=1:
//
//	BATON_REPRO=1 go test ./chaos -run TestNothingIsLeftAfterTheGuard -v
func TestNothingIsLeftAfterTheGuard(t *testing.T) {
	if os.Getenv("BATON_REPRO") == "" {
		t.Skip("reproduces a Baton defect (issue 16); set BATON_REPRO=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildBaton(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
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
	wctx, hangUp := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Acquire(wctx, "hung", client.AcquireOptions{TTL: time.Second, Fair: true, Wait: 5 * time.Second})
	hangUp()
	t.Logf("hung-up fair wait: %v", err)
	if _, err := c.Release(ctx, "hung", h.Lease.ID); err != nil {
		t.Fatal(err)
	}

	finished := time.Now()
	left, err := awaitKeys(ctx, top.rdb, guard+guardSlack, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("%v after the last hold and ticket ended (BATON_FENCE_GUARD %v), Redis still holds %v",
			time.Since(finished).Round(time.Millisecond), guard, left)
	}
}
