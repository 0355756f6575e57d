package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

// A session renews itself and its holds, whichever way they were taken, and
// Close releases them all.
func TestSession(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	const ttl = 900 * time.Millisecond
	s, err := r.C.NewSession(r.ctx(), client.SessionOptions{TTL: ttl, Owner: "job-7"})
	if err != nil {
		t.Fatal(err)
	}
	if info := s.Info(); info.ID != s.ID() || info.Owner != "job-7" || info.TTL <= 0 || info.TTL > ttl {
		t.Fatalf("session %+v", info)
	}
	a, err := s.Lock(r.ctx(), "client:s1", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.C.Lock(r.ctx(), "client:s2", client.LockOptions{Session: s.ID(), Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	r.stillHeld("client:s1", a.Fence(), 3*ttl)
	if st := r.state("client:s2"); !st.Held || st.Fence != b.Fence() {
		t.Fatalf("s2 %+v", st)
	}
	d, err := r.Admin.GetSession(r.ctx(), s.ID())
	if err != nil || d.Locks != 2 || len(d.Holds) != 2 {
		t.Fatalf("session %+v, %v", d, err)
	}
	if n := r.count("/v1/sessions/"); n < 3 {
		t.Fatalf("%d session requests in 3 ttls, want renewals", n)
	}
	if n := r.count(leasePath(a)); n != 0 {
		t.Fatalf("%d requests on a session's hold: the session renews it", n)
	}

	if err := s.Close(r.ctx()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client:s1", "client:s2"} {
		if st := r.state(name); st.Held {
			t.Fatalf("%s after Close: %+v", name, st)
		}
	}
	for _, h := range []*client.Hold{a, b} {
		notLost(t, h)
		if err := h.Unlock(r.ctx()); !errors.Is(err, client.ErrReleased) {
			t.Fatalf("unlock after Close: %v, want ErrReleased", err)
		}
	}
	if err := s.Close(r.ctx()); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Lock(r.ctx(), "client:s3", client.LockOptions{}); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("lock in a closed session: %v", err)
	}
	if _, err := r.Admin.GetSession(r.ctx(), s.ID()); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("get a closed session: %v", err)
	}
}

// A hold taken from a session by force is lost on its own; a session that is
// ended elsewhere is lost with every hold in it.
func TestSessionLost(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	const ttl = 900 * time.Millisecond
	s, err := r.C.NewSession(r.ctx(), client.SessionOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Lock(r.ctx(), "client:sl1", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Lock(r.ctx(), "client:sl2", client.LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admin.ForceRelease(r.ctx(), "client:sl1"); err != nil {
		t.Fatal(err)
	}
	awaitLost(t, a, 3*time.Second)
	if err := a.Err(); !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrLeaseNotHeld) {
		t.Fatalf("Err %v", err)
	}
	notLost(t, b)

	if _, err := r.Admin.EndSession(r.ctx(), s.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("session not lost")
	}
	awaitLost(t, b, time.Second)
	if err := b.Err(); !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("Err %v", err)
	}
	if err := s.Close(r.ctx()); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Close of a lost session: %v", err)
	}
	if _, err := s.Lock(r.ctx(), "client:sl3", client.LockOptions{}); !errors.Is(err, client.ErrLost) {
		t.Fatalf("lock in a lost session: %v", err)
	}
}

// A hold in a session this Client did not make is watched: lost when the
// session, which nobody renews, runs out.
func TestHoldInForeignSession(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	info, err := r.Admin.CreateSession(r.ctx(), client.SessionOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.C.Lock(r.ctx(), "client:foreign", client.LockOptions{Session: info.ID})
	if err != nil {
		t.Fatal(err)
	}
	awaitLost(t, h, 3*time.Second)
	if err := h.Err(); !errors.Is(err, client.ErrLost) {
		t.Fatalf("Err %v", err)
	}
	fence := h.Fence()
	if st, err := r.Admin.Watch(r.ctx(), "client:foreign", 2*time.Second, &fence); err != nil || st.Held {
		t.Fatalf("state %+v, %v", st, err)
	}
}

// The session endpoints, one call each.
func TestSessionEndpoints(t *testing.T) {
	r := startRig(t)
	c := r.Admin
	ctx := r.ctx()
	info, err := c.CreateSession(ctx, client.SessionOptions{TTL: 10 * time.Second, Owner: "o", IdempotencyKey: "k1"})
	if err != nil || info.ID == "" || info.URL != "/v1/sessions/"+info.ID || info.Locks != 0 || info.Owner != "o" {
		t.Fatalf("create %+v, %v", info, err)
	}
	again, err := c.CreateSession(ctx, client.SessionOptions{TTL: 10 * time.Second, Owner: "o", IdempotencyKey: "k1"})
	if err != nil || again.ID != info.ID {
		t.Fatalf("create again with the key: %+v, %v", again, err)
	}
	_, err = c.CreateSession(ctx, client.SessionOptions{TTL: 5 * time.Second, IdempotencyKey: "k1"})
	wantProblem(t, err, client.ErrIdempotencyKeyMismatch, 422)

	res, err := c.Acquire(ctx, "client:ep", client.AcquireOptions{Session: info.ID, Shared: true, Limit: 3, IdempotencyKey: "k2"})
	if err != nil || !res.Lease.Shared || res.Lease.Limit != 3 || res.Replayed {
		t.Fatalf("acquire in session %+v, %v", res, err)
	}
	replay, err := c.Acquire(ctx, "client:ep", client.AcquireOptions{Session: info.ID, Shared: true, Limit: 3, IdempotencyKey: "k2"})
	if err != nil || !replay.Replayed || replay.Lease.ID != res.Lease.ID {
		t.Fatalf("replay %+v, %v", replay, err)
	}
	d, err := c.GetSession(ctx, info.ID)
	if err != nil || d.Locks != 1 || len(d.Holds) != 1 || d.Holds[0].Lease != res.Lease.ID || d.Holds[0].Name != "client:ep" ||
		!d.Holds[0].Shared || d.Holds[0].Fence != res.Lease.Fence || d.Holds[0].URL != res.Lease.URL {
		t.Fatalf("get %+v, %v", d, err)
	}
	renewed, err := c.RenewSession(ctx, info.ID, 20*time.Second)
	if err != nil || renewed.TTL <= 19*time.Second {
		t.Fatalf("renew %+v, %v", renewed, err)
	}
	n, err := c.EndSession(ctx, info.ID)
	if err != nil || n != 1 {
		t.Fatalf("end %d, %v", n, err)
	}
	_, err = c.EndSession(ctx, info.ID)
	wantProblem(t, err, client.ErrSessionNotFound, 404)
	_, err = c.Acquire(context.Background(), "client:ep", client.AcquireOptions{Session: info.ID})
	wantProblem(t, err, client.ErrSessionNotFound, 404)

	// A key whose hold has ended is used up.
	res, err = c.Acquire(ctx, "client:ep", client.AcquireOptions{IdempotencyKey: "k3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "client:ep", res.Lease.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, "client:ep", client.AcquireOptions{IdempotencyKey: "k3"})
	wantProblem(t, err, client.ErrIdempotencyKeyUsed, 409)
}
