package client_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

func TestGrantReenterRenewRelease(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("orders:1", client.AcquireOptions{TTL: 5 * time.Second, Owner: "worker-1"})
	if l.Name != "orders:1" || l.Fence < 1 || l.Count != 1 || l.Owner != "worker-1" ||
		l.URL != "/v1/locks/orders:1/leases/"+l.ID || l.TTL <= 4*time.Second || l.TTL > 5*time.Second ||
		!l.ExpiresAt.After(l.AcquiredAt) || time.Since(l.AcquiredAt) > time.Minute {
		t.Fatalf("granted %+v", l)
	}

	res, err := e.C.Acquire(e.ctx(), "orders:1", client.AcquireOptions{Lease: l.ID, TTL: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Reentered || res.Ticket != nil || res.Lease.ID != l.ID || res.Lease.Fence != l.Fence ||
		res.Lease.Count != 2 || res.Lease.TTL <= 6*time.Second {
		t.Fatalf("re-entered %+v, lease %+v", res, res.Lease)
	}

	got, err := e.C.Lease(e.ctx(), "orders:1", l.ID)
	if err != nil || got.Count != 2 || got.Fence != l.Fence {
		t.Fatalf("lease %+v, %v", got, err)
	}

	got, err = e.C.Renew(e.ctx(), "orders:1", l.ID, 9*time.Second)
	if err != nil || got.TTL <= 8*time.Second || got.Fence != l.Fence {
		t.Fatalf("renew 9s: %+v, %v", got, err)
	}
	got, err = e.C.Renew(e.ctx(), "orders:1", l.ID, 0) // the last ttl, 9s
	if err != nil || got.TTL <= 8*time.Second {
		t.Fatalf("renew default: %+v, %v", got, err)
	}

	rel, err := e.C.Release(e.ctx(), "orders:1", l.ID)
	if err != nil || *rel != (client.Released{Name: "orders:1", Count: 1, Released: false}) {
		t.Fatalf("first release %+v, %v", rel, err)
	}
	rel, err = e.C.Release(e.ctx(), "orders:1", l.ID)
	if err != nil || *rel != (client.Released{Name: "orders:1", Count: 0, Released: true}) {
		t.Fatalf("second release %+v, %v", rel, err)
	}
}

func TestLeaseNotHeld(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("gone", client.AcquireOptions{})
	if _, err := e.C.Release(e.ctx(), "gone", l.ID); err != nil {
		t.Fatal(err)
	}
	_, err := e.C.Release(e.ctx(), "gone", l.ID)
	p := wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
	if p.Type != "/problems/lease-not-held" || !strings.Contains(err.Error(), `release lease on "gone": lease-not-held (404)`) {
		t.Fatalf("problem %+v, error %q", *p, err)
	}
	_, err = e.C.Lease(e.ctx(), "gone", l.ID)
	wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
	_, err = e.C.Renew(e.ctx(), "gone", l.ID, time.Second)
	wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
	_, err = e.C.Acquire(e.ctx(), "gone", client.AcquireOptions{Lease: l.ID})
	wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
	// An id with characters that need escaping still reaches the route.
	_, err = e.C.Lease(e.ctx(), "gone", "no/such lease?")
	wantProblem(t, err, client.ErrLeaseNotHeld, http.StatusNotFound)
}

func TestInvalid(t *testing.T) {
	e := newEnv(t)
	l := e.acquire("valid", client.AcquireOptions{})
	tests := []struct {
		name  string
		give  func() error
		field string // the field the problem names; "" for invalid-name
	}{
		{"ttl below min", func() error {
			_, err := e.C.Acquire(e.ctx(), "valid2", client.AcquireOptions{TTL: time.Millisecond})
			return err
		}, "ttl_ms"},
		{"wait above max", func() error {
			_, err := e.C.Acquire(e.ctx(), "valid2", client.AcquireOptions{Wait: 2 * time.Minute})
			return err
		}, "wait_ms"},
		{"negative ttl", func() error {
			_, err := e.C.Acquire(e.ctx(), "valid2", client.AcquireOptions{TTL: -time.Second})
			return err
		}, "ttl_ms"},
		{"owner too long", func() error {
			_, err := e.C.Acquire(e.ctx(), "valid2", client.AcquireOptions{Owner: strings.Repeat("o", 129)})
			return err
		}, "owner"},
		{"fair re-entry", func() error {
			_, err := e.C.Acquire(e.ctx(), "valid", client.AcquireOptions{Lease: l.ID, Fair: true})
			return err
		}, "fair"},
		{"renew ttl above max", func() error {
			_, err := e.C.Renew(e.ctx(), "valid", l.ID, 25*time.Hour)
			return err
		}, "ttl_ms"},
		{"watch wait above max", func() error {
			_, err := e.C.Watch(e.ctx(), "valid", 2*time.Minute, nil)
			return err
		}, "wait_ms"},
		{"bad name", func() error {
			_, err := e.C.Acquire(e.ctx(), "no spaces", client.AcquireOptions{})
			return err
		}, ""},
		{"bad name in state", func() error {
			_, err := e.C.State(e.ctx(), "a/b")
			return err
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wantProblem(t, tt.give(), client.ErrInvalid, http.StatusBadRequest)
			if tt.field == "" && p.Type != "/problems/invalid-name" {
				t.Fatalf("type %q, want /problems/invalid-name", p.Type)
			}
			if tt.field != "" && p.Errors[tt.field] == "" {
				t.Fatalf("errors %v, want one for %q", p.Errors, tt.field)
			}
		})
	}
}
