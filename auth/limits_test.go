package auth

import (
	"net/http/httptest"
	"strings"
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
		p := newPrincipal(Key{Name: "k", RatePerS: tt.give}, newRuntime(), Caps{})
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
	unlimited := newPrincipal(Key{Name: "u"}, newRuntime(), Caps{})
	for range 10000 {
		if ok, _ := unlimited.Allow(); !ok {
			t.Fatal("a principal without rate_per_s was refused")
		}
	}
}

func TestAllowPerPrincipal(t *testing.T) {
	a := newPrincipal(Key{Name: "a", RatePerS: 1}, newRuntime(), Caps{})
	b := newPrincipal(Key{Name: "b", RatePerS: 1}, newRuntime(), Caps{})
	for range 3 {
		a.Allow()
	}
	if ok, _ := b.Allow(); !ok {
		t.Error("a's requests used b's bucket")
	}
}

func TestWaiters(t *testing.T) {
	p := newPrincipal(Key{Name: "w", MaxWaiters: 3}, newRuntime(), Caps{})
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

// A key's caps on live objects are its own max_holds, max_tickets and
// max_sessions, each it leaves out the Guard's default (kept across a
// reload); the built-in principals have BuiltinCaps, none unless given.
func TestKeyCapsDefault(t *testing.T) {
	path := writeFile(t, t.TempDir(), "keys.yaml", withSums(strings.Replace(goodYAML, "    max_tickets: 50\n", "", 1)))
	def := Caps{Holds: 10, Tickets: 20, Sessions: 30}
	g, err := NewGuard(Config{File: path, Logger: zerolog.Nop(), KeyCaps: def})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		b := g.Lookup("billing-web")
		if got, want := b.Caps(), (Caps{Holds: 500, Tickets: 20, Sessions: 5}); got != want {
			t.Errorf("%s: billing-web's caps %+v, want %+v (its own, the default for max_tickets)", when, got, want)
		}
		if got, want := b.OwnCaps(), (Caps{Holds: 500, Sessions: 5}); got != want {
			t.Errorf("%s: billing-web's own caps %+v, want %+v", when, got, want)
		}
		if got := g.Lookup("ops").Caps(); got != def {
			t.Errorf("%s: ops (no caps of its own) has %+v, want the default %+v", when, got, def)
		}
	}
	check("at start")
	if err := g.Reload(); err != nil {
		t.Fatal(err)
	}
	check("after a reload")

	builtin := Caps{Holds: 7}
	for _, c := range []Config{{Logger: zerolog.Nop(), KeyCaps: def}, {Auth: "off", Logger: zerolog.Nop(), KeyCaps: def}} {
		g, err := NewGuard(c)
		if err != nil {
			t.Fatal(err)
		}
		if p := principalOf(t, g); p.Caps() != (Caps{}) {
			t.Errorf("%s mode: %s has caps %+v without BuiltinCaps, want none", g.Mode(), p.Name(), p.Caps())
		}
		c.BuiltinCaps = builtin
		if g, err = NewGuard(c); err != nil {
			t.Fatal(err)
		}
		if p := principalOf(t, g); p.Caps() != builtin {
			t.Errorf("%s mode: %s has caps %+v, want BuiltinCaps %+v", g.Mode(), p.Name(), p.Caps(), builtin)
		}
	}
	if Loopback().Caps() != (Caps{}) || Anyone().Caps() != (Caps{}) {
		t.Error("a Guard's BuiltinCaps changed the package's built-in principals")
	}
}

// principalOf authenticates a loopback request to g.
func principalOf(t *testing.T, g *Guard) *Principal {
	t.Helper()
	r := httptest.NewRequest("POST", "http://localhost/v1/locks/a", nil)
	r.RemoteAddr = "127.0.0.1:5000"
	p, err := g.Authenticate(r)
	if err != nil {
		t.Fatalf("%s mode: %v", g.Mode(), err)
	}
	return p
}
