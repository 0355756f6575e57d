package client_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

func TestLockHeld(t *testing.T) {
	e := newEnv(t)
	e.acquire("held", client.AcquireOptions{TTL: 10 * time.Second, Owner: "a"})
	_, err := e.C.Acquire(e.ctx(), "held", client.AcquireOptions{Owner: "b"})
	p := wantProblem(t, err, client.ErrLockHeld, http.StatusLocked)
	if p.Type != "/problems/lock-held" || p.Owner != "a" || p.Waiters != 0 ||
		p.TTL <= 8*time.Second || p.TTL > 10*time.Second ||
		p.RetryAfter < 9*time.Second || p.RetryAfter > 10*time.Second {
		t.Fatalf("problem %+v", *p)
	}
	if errors.Is(err, client.ErrLeaseNotHeld) || errors.Is(err, client.ErrInvalid) {
		t.Fatalf("%v matches another sentinel", err)
	}
	if !strings.HasPrefix(err.Error(), `acquire "held": lock-held (423): `) {
		t.Fatalf("error %q", err)
	}
}

func TestWaitGrantedAfterRelease(t *testing.T) {
	e := newEnv(t)
	first := e.acquire("wait", client.AcquireOptions{})
	type result struct {
		res *client.AcquireResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.C.Acquire(e.ctx(), "wait", client.AcquireOptions{Wait: 10 * time.Second})
		done <- result{res, err}
	}()
	e.awaitWaiters(1)
	if _, err := e.C.Release(e.ctx(), "wait", first.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.Lease == nil || r.res.Reentered || r.res.Lease.Fence <= first.Fence {
		t.Fatalf("waiter got %+v, %v; first fence %d", r.res, r.err, first.Fence)
	}
}

func TestStateAndWatch(t *testing.T) {
	e := newEnv(t)
	st, err := e.C.State(e.ctx(), "watched")
	if err != nil || st.Name != "watched" || st.Held || st.Mode != "free" || st.Holders != 0 || len(st.Holds) != 0 ||
		st.Fence != 0 || st.Owner != "" || st.TTL != 0 || !st.ExpiresAt.IsZero() || st.Limit != 0 ||
		!strings.HasPrefix(string(st.Raw), `{"name":"watched"`) {
		t.Fatalf("free state %+v, %v", st, err)
	}
	l := e.acquire("watched", client.AcquireOptions{TTL: 20 * time.Second, Owner: "w"})
	st, err = e.C.State(e.ctx(), "watched")
	if err != nil || !st.Held || st.Owner != "w" || st.Count != 1 || st.Fence != l.Fence ||
		st.TTL <= 19*time.Second || st.ExpiresAt.IsZero() || st.Waiters != 0 || st.Mode != "exclusive" ||
		st.Holders != 1 || len(st.Holds) != 1 || st.Holds[0].Owner != "w" || st.Holds[0].Fence != l.Fence ||
		st.Holds[0].Shared || st.Holds[0].Count != 1 || st.Holds[0].TTL <= 19*time.Second {
		t.Fatalf("held state %+v, %v", st, err)
	}

	// A fence other than the holder's answers at once.
	other := l.Fence + 100
	st, err = e.C.Watch(e.ctx(), "watched", 10*time.Second, &other)
	if err != nil || !st.Held || st.Fence != l.Fence {
		t.Fatalf("watch with another fence %+v, %v", st, err)
	}

	type result struct {
		st  *client.LockState
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := e.C.Watch(e.ctx(), "watched", 10*time.Second, &l.Fence)
		done <- result{st, err}
	}()
	e.awaitWaiters(1)
	if _, err := e.C.Release(e.ctx(), "watched", l.ID); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.st.Held || r.st.Fence != l.Fence || !r.st.ExpiresAt.IsZero() {
		t.Fatalf("watch after release %+v, %v", r.st, r.err)
	}
}

func TestForceRelease(t *testing.T) {
	e := newEnv(t)
	released, err := e.C.ForceRelease(e.ctx(), "forced")
	if err != nil || released {
		t.Fatalf("force on a free lock: %v, %v; want false", released, err)
	}
	l := e.acquire("forced", client.AcquireOptions{})
	released, err = e.C.ForceRelease(e.ctx(), "forced")
	if err != nil || !released {
		t.Fatalf("force on a held lock: %v, %v; want true", released, err)
	}
	_, err = e.C.Renew(e.ctx(), "forced", l.ID, 0)
	wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
}
