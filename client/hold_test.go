package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

func TestLockAndUnlock(t *testing.T) {
	r := startRig(t)
	h := r.lock("client:basic", client.LockOptions{TTL: 20 * time.Second, Owner: "worker-3"})
	l := h.Lease()
	if h.Name() != "client:basic" || h.Fence() < 1 || l.Fence != h.Fence() || l.Owner != "worker-3" ||
		l.URL != "/v1/locks/client:basic/leases/"+l.ID || l.TTL <= 19*time.Second || l.Shared {
		t.Fatalf("hold %q fence %d, lease %+v", h.Name(), h.Fence(), l)
	}
	if st := r.state("client:basic"); !st.Held || st.Fence != h.Fence() || st.Owner != "worker-3" {
		t.Fatalf("state %+v", st)
	}

	// Someone else is refused at once, and told who holds it for how long.
	_, err := r.C.Lock(r.ctx(), "client:basic", client.LockOptions{})
	p := wantProblem(t, err, client.ErrLockHeld, http.StatusLocked)
	if p.Owner != "worker-3" || p.TTL < 19*time.Second || p.RetryAfter < 19*time.Second || !strings.Contains(err.Error(), `"client:basic"`) {
		t.Fatalf("problem %+v, error %q", *p, err)
	}

	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if st := r.state("client:basic"); st.Held {
		t.Fatalf("after unlock: %+v", st)
	}
	if err := h.Unlock(r.ctx()); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("second unlock: %v, want ErrReleased", err)
	}
	notLost(t, h)
}

// A short lease outlives its ttl many times over while renewed, and nothing
// renews it once Unlock has returned.
func TestAutoRenewUntilUnlock(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	const ttl = 1500 * time.Millisecond // a renewal every 500 ms keeps it, however loaded the machine
	h := r.lock("client:renew", client.LockOptions{TTL: ttl})
	r.stillHeld("client:renew", h.Fence(), 4*ttl)
	notLost(t, h)
	path := leasePath(h)
	if n := r.count(path); n < 4 {
		t.Fatalf("%d requests on the lease in 4 ttls, want renewals every ttl/3", n)
	}
	if l := h.Lease(); l.TTL <= 0 || l.TTL > ttl {
		t.Fatalf("lease after renewals %+v", l)
	}

	if err := h.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
	after := r.count(path)
	time.Sleep(ttl) // three renewal periods in which nothing may happen
	if n := r.count(path); n != after {
		t.Fatalf("%d requests on the lease after Unlock returned, want none", n-after)
	}
	if st := r.state("client:renew"); st.Held {
		t.Fatalf("after unlock: %+v", st)
	}
}

// A renewal answered 404 (the hold was forced) loses the hold at once: Lost
// closes, renewal stops, and the next call says so. The old hold's renewal
// never touches a later hold of the same lock.
func TestLostOnRenewal404(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	// The loss is noticed by the first renewal (ttl/3), well before the lease
	// would end (ttl), even on a loaded machine.
	const ttl = 6 * time.Second
	h := r.lock("client:lost", client.LockOptions{TTL: ttl})
	if _, err := r.Admin.ForceRelease(r.ctx(), "client:lost"); err != nil {
		t.Fatal(err)
	}
	if took := awaitLost(t, h, 2*ttl); took > ttl/3+2*time.Second {
		t.Errorf("lost noticed after %v, want within a renewal period (%v), not at the lease's end", took, ttl/3)
	}
	if err := h.Err(); !errors.Is(err, client.ErrLost) || !errors.Is(err, client.ErrLeaseNotHeld) ||
		!strings.Contains(err.Error(), `lock "client:lost" lost`) {
		t.Fatalf("Err %v, want ErrLost wrapping ErrLeaseNotHeld", err)
	}
	if err := h.Unlock(r.ctx()); !errors.Is(err, client.ErrLost) {
		t.Fatalf("unlock after loss: %v, want ErrLost", err)
	}

	// A later hold of the same lock, which nobody renews, runs out on time:
	// the old hold's renewal is gone, and never used the new lease.
	old := r.count(leasePath(h))
	res, err := r.Admin.Acquire(r.ctx(), "client:lost", client.AcquireOptions{TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, err := r.Admin.Watch(r.ctx(), "client:lost", 20*time.Second, &res.Lease.Fence)
	if err != nil || st.Held {
		t.Fatalf("watch the later hold: %+v, %v", st, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the later hold ended after %v, want its 500ms ttl: something renewed it", took)
	}
	if n := r.count(leasePath(h)); n != old {
		t.Fatalf("%d requests on the lost lease after it was lost", n-old)
	}
}

// Unlock, then Lock again: only the new hold is renewed, by its own Hold.
func TestRenewalNeverTouchesALaterHold(t *testing.T) {
	t.Parallel()
	r := startRig(t)
	const ttl = 1500 * time.Millisecond
	first := r.lock("client:later", client.LockOptions{TTL: ttl})
	if err := first.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
	firstN := r.count(leasePath(first))
	second := r.lock("client:later", client.LockOptions{TTL: ttl})
	if second.Fence() <= first.Fence() || second.Lease().ID == first.Lease().ID {
		t.Fatalf("second hold %+v, first %+v", second.Lease(), first.Lease())
	}
	r.stillHeld("client:later", second.Fence(), 3*ttl)
	if n := r.count(leasePath(first)); n != firstN {
		t.Fatalf("%d requests on the first lease after its Unlock", n-firstN)
	}
	if n := r.count(leasePath(second)); n < 3 {
		t.Fatalf("%d renewals of the second hold in 3 ttls", n)
	}
	if err := second.Unlock(r.ctx()); err != nil {
		t.Fatal(err)
	}
}

func TestSharedLocks(t *testing.T) {
	r := startRig(t)
	o := client.LockOptions{Shared: true, Limit: 2, Owner: "reader"}
	a := r.lock("client:sem", o)
	b := r.lock("client:sem", o)
	if l := a.Lease(); !l.Shared || l.Limit != 2 || b.Fence() <= a.Fence() {
		t.Fatalf("shared leases %+v, %+v", l, b.Lease())
	}
	st := r.state("client:sem")
	if st.Mode != "shared" || st.Holders != 2 || st.Limit != 2 || len(st.Holds) != 2 || !st.Holds[0].Shared {
		t.Fatalf("state %+v", st)
	}
	_, err := r.C.Lock(r.ctx(), "client:sem", o)
	wantProblem(t, err, client.ErrLockHeld, http.StatusLocked)
	_, err = r.C.Lock(r.ctx(), "client:sem", client.LockOptions{Shared: true, Limit: 3})
	if p := wantProblem(t, err, client.ErrLimitMismatch, http.StatusConflict); p.Limit != 2 {
		t.Fatalf("limit-mismatch %+v, want the lock's limit 2", *p)
	}
	_, err = r.C.Lock(r.ctx(), "client:sem", client.LockOptions{}) // a writer
	wantProblem(t, err, client.ErrLockHeld, http.StatusLocked)
	for _, h := range []*client.Hold{a, b} {
		if err := h.Unlock(r.ctx()); err != nil {
			t.Fatal(err)
		}
	}
	w := r.lock("client:sem", client.LockOptions{})
	if w.Lease().Shared || w.Lease().Limit != 0 {
		t.Fatalf("exclusive lease %+v", w.Lease())
	}
}

// A waiting Lock is granted when the holder lets go; one whose wait runs out
// gets the holder's 423.
func TestLockWaits(t *testing.T) {
	r := startRig(t)
	holder, err := r.Admin.Acquire(r.ctx(), "client:wait", client.AcquireOptions{TTL: 20 * time.Second, Owner: "first"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = r.C.Lock(r.ctx(), "client:wait", client.LockOptions{Wait: 300 * time.Millisecond})
	if p := wantProblem(t, err, client.ErrLockHeld, http.StatusLocked); p.Owner != "first" {
		t.Fatalf("problem %+v", *p)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 10*time.Second {
		t.Fatalf("gave up after %v, want 300ms (not the holder's 20 s)", took)
	}

	if _, err := r.C.Lock(r.ctx(), "client:wait", client.LockOptions{Wait: -time.Second, Fair: true}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a negative wait: %v, want ErrInvalid", err)
	}

	got := make(chan *client.Hold, 1)
	go func() {
		h, err := r.C.Lock(r.ctx(), "client:wait", client.LockOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	eventually(t, "the waiter to wait", func() bool { return r.count("/v1/locks/client:wait") >= 2 })
	if _, err := r.Admin.Release(r.ctx(), "client:wait", holder.Lease.ID); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if h == nil || h.Fence() <= holder.Lease.Fence {
		t.Fatalf("waiter got %v", h)
	}
	_ = h.Unlock(r.ctx())
}

// A wait longer than one request may ask for is served by several.
func TestLockWaitsAcrossRequests(t *testing.T) {
	defer client.SetWaitChunk(200 * time.Millisecond)()
	r := startRig(t)
	holder, err := r.Admin.Acquire(r.ctx(), "client:chunks", client.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := r.lock("client:chunks", client.LockOptions{Wait: 10 * time.Second})
	if h.Fence() <= holder.Lease.Fence {
		t.Fatalf("fence %d after %d", h.Fence(), holder.Lease.Fence)
	}
	if n := r.count("/v1/locks/client:chunks"); n < 3 {
		t.Fatalf("%d requests for a 1s wait in 200ms requests", n)
	}
	ctx, cancel := context.WithTimeout(r.ctx(), 500*time.Millisecond)
	defer cancel()
	_, err = r.C.Lock(ctx, "client:chunks", client.LockOptions{Wait: client.WaitForever})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting forever on a held lock: %v, want ctx's deadline", err)
	}
}

// WithLock releases on every way out of fn, and cancels fn's context when the
// hold is lost.
func TestWithLock(t *testing.T) {
	r := startRig(t)
	var fence int64
	err := r.C.WithLock(r.ctx(), "client:with", client.LockOptions{}, func(ctx context.Context, h *client.Hold) error {
		fence = h.Fence()
		if st := r.state("client:with"); !st.Held || st.Fence != fence {
			t.Errorf("inside: %+v", st)
		}
		return nil
	})
	if err != nil || fence == 0 {
		t.Fatalf("WithLock: %v", err)
	}
	if st := r.state("client:with"); st.Held {
		t.Fatalf("after: %+v", st)
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not come through")
			}
		}()
		_ = r.C.WithLock(r.ctx(), "client:with", client.LockOptions{}, func(context.Context, *client.Hold) error {
			panic("boom")
		})
	}()
	if st := r.state("client:with"); st.Held {
		t.Fatalf("after a panic: %+v", st)
	}

	errWork := errors.New("work failed")
	err = r.C.WithLock(r.ctx(), "client:with", client.LockOptions{}, func(context.Context, *client.Hold) error { return errWork })
	if !errors.Is(err, errWork) || r.state("client:with").Held {
		t.Fatalf("fn's error: %v", err)
	}

	err = r.C.WithLock(r.ctx(), "client:with", client.LockOptions{TTL: 600 * time.Millisecond}, func(ctx context.Context, h *client.Hold) error {
		if _, err := r.Admin.ForceRelease(r.ctx(), "client:with"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), client.ErrLost) {
				t.Errorf("cause %v", context.Cause(ctx))
			}
			return nil // the work stopped in time, and says nothing
		case <-time.After(3 * time.Second):
			return errors.New("not cancelled on loss")
		}
	})
	if !errors.Is(err, client.ErrLost) {
		t.Fatalf("WithLock after a loss: %v, want ErrLost", err)
	}
}
