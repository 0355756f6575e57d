package auth

import (
	"sync"
	"testing"
	"time"
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
