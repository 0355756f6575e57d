package auth

import (
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestAllow(t *testing.T) {
	tests := []struct {
		give      float64 // rate_per_s
		wantBurst int
		wantAfter time.Duration
	}{
		{give: 1, wantBurst: 2, wantAfter: time.Second},
		{give: 5, wantBurst: 10, wantAfter: time.Second},
		{give: 0.1, wantBurst: 1, wantAfter: 10 * time.Second},
		{give: 0.4, wantBurst: 1, wantAfter: 3 * time.Second}, // 2.5 s, rounded up
	}
	for _, tt := range tests {
		p := newPrincipal(Key{Name: "k", RatePerS: tt.give}, newRuntime())
		for i := range tt.wantBurst {
			if ok, _ := p.Allow(); !ok {
				t.Fatalf("rate %v: request %d of the burst refused", tt.give, i+1)
			}
		}
		ok, after := p.Allow()
		if ok || after < time.Second || after > tt.wantAfter || after%time.Second != 0 {
			t.Errorf("rate %v: after the burst Allow = %v, %v; want false and whole seconds up to %v", tt.give, ok, after, tt.wantAfter)
		}
	}
	unlimited := newPrincipal(Key{Name: "u"}, newRuntime())
	for range 10000 {
		if ok, _ := unlimited.Allow(); !ok {
			t.Fatal("a principal without rate_per_s was refused")
		}
	}
}

func TestAllowPerPrincipal(t *testing.T) {
	a := newPrincipal(Key{Name: "a", RatePerS: 1}, newRuntime())
	b := newPrincipal(Key{Name: "b", RatePerS: 1}, newRuntime())
	for range 3 {
		a.Allow()
	}
	if ok, _ := b.Allow(); !ok {
		t.Error("a's requests used b's bucket")
	}
}

func TestWaiters(t *testing.T) {
	p := newPrincipal(Key{Name: "w", MaxWaiters: 3}, newRuntime())
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 50 {
		wg.Go(func() {
			if p.AcquireWaiter() {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 3 || p.Waiters() != 3 {
		t.Fatalf("granted %d, counted %d; want 3", granted, p.Waiters())
	}
	p.ReleaseWaiter()
	if !p.AcquireWaiter() || p.AcquireWaiter() {
		t.Error("after one release, exactly one more waiter should fit")
	}
}

// A key without max_waiters gets the Guard's default, which a reload keeps
// applying; a key's own max_waiters wins; the built-in principals have none.
func TestKeyMaxWaitersDefault(t *testing.T) {
	path := writeFile(t, t.TempDir(), "keys.yaml", withSums(goodYAML))
	g, err := NewGuard(Config{File: path, Logger: zerolog.Nop(), KeyMaxWaiters: 2})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if n, byDefault := g.Lookup("ops").MaxWaiters(); n != 2 || !byDefault {
			t.Errorf("%s: ops (no max_waiters) has %d, by default %v; want 2 by default", when, n, byDefault)
		}
		if n, byDefault := g.Lookup("billing-web").MaxWaiters(); n != 100 || byDefault {
			t.Errorf("%s: billing-web (max_waiters: 100) has %d, by default %v; want its own 100", when, n, byDefault)
		}
		ops := g.Lookup("ops")
		if !ops.AcquireWaiter() || !ops.AcquireWaiter() || ops.AcquireWaiter() {
			t.Errorf("%s: ops is not held to 2 long-polls", when)
		}
		ops.ReleaseWaiter()
		ops.ReleaseWaiter()
	}
	check("at start")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	check("after a reload")
	for _, p := range []*Principal{Loopback(), Anyone()} {
		if n, _ := p.MaxWaiters(); n != 0 {
			t.Errorf("%s has max_waiters %d, want none", p.Name(), n)
		}
	}
}
