package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// principals returns the principals of goodYAML's keys, by name.
func principals(t *testing.T) map[string]*Principal {
	t.Helper()
	keys, err := ParseKeys("k.yaml", []byte(withSums(goodYAML)))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*Principal{}
	for _, k := range keys {
		m[k.Name] = newPrincipal(k, newRuntime(), Caps{})
	}
	return m
}

func TestPrincipalCan(t *testing.T) {
	ps := principals(t)
	billing, ops, worker := ps["billing-web"], ps["ops"], ps["worker-1"]
	tests := []struct {
		who    *Principal
		action Action
		name   string
		want   bool
	}{
		{billing, ActionLock, "billing:invoice", true},
		{billing, ActionRead, "billing:invoice", true},
		{billing, ActionAdmin, "billing:invoice", false},
		{billing, ActionLock, "payroll", false},
		{billing, ActionMetrics, "", false},
		{ops, ActionAdmin, "anything", true},
		{ops, ActionLock, "anything", true}, // admin includes lock
		{ops, ActionRead, "anything", true}, // and read
		{ops, ActionMetrics, "", true},
		{worker, ActionLock, "jobs:1", true},
		{worker, ActionLock, "jobs:12", false},
		{worker, ActionRead, "jobs:1", false},
		{Loopback(), ActionAdmin, "x", true},
		{Anyone(), ActionMetrics, "", true},
	}
	for _, tt := range tests {
		if got := tt.who.Can(tt.action, tt.name); got != tt.want {
			t.Errorf("%s.Can(%s, %q) = %v, want %v", tt.who.Name(), tt.action, tt.name, got, tt.want)
		}
		err := tt.who.Authorize(tt.action, tt.name)
		if (err == nil) != tt.want && tt.name != "" {
			t.Errorf("%s.Authorize(%s, %q) = %v", tt.who.Name(), tt.action, tt.name, err)
		}
	}
	if !billing.CanAny(ActionLock) || billing.CanAny(ActionAdmin) || billing.CanMetrics() || !ops.CanMetrics() {
		t.Error("CanAny or CanMetrics is wrong")
	}
	err := billing.Authorize(ActionAdmin, "billing:x")
	var fe *ForbiddenError
	if !errors.Is(err, ErrForbidden) || !errors.As(err, &fe) || err.Error() != `key "billing-web" has no "admin" grant for lock "billing:x"` {
		t.Errorf("Authorize = %v", err)
	}
	if err := billing.Authorize(ActionMetrics, ""); err == nil || !strings.Contains(err.Error(), `has no "metrics" grant`) {
		t.Errorf("Authorize(metrics) = %v", err)
	}
}

func TestPrincipalID(t *testing.T) {
	sum := sha256.Sum256([]byte("billing-web"))
	want := hex.EncodeToString(sum[:16])
	if got := PrincipalID("billing-web"); got != want || len(got) != 32 {
		t.Errorf("PrincipalID = %q, want %q", got, want)
	}
	if Loopback().ID() == Anyone().ID() || Loopback().Name() == Anyone().Name() {
		t.Error("the built-in principals share a name or an ID")
	}
	for _, name := range []string{LoopbackName, AnyoneName, Anonymous} {
		if validKeyName(name) && name != Anonymous {
			t.Errorf("built-in name %q could be a key's name", name)
		}
	}
}

func TestGrantsAreCopies(t *testing.T) {
	p := principals(t)["billing-web"]
	gs := p.Grants()
	gs[0] = Grant{}
	if !p.Can(ActionLock, "billing:x") {
		t.Error("changing Grants() changed the principal")
	}
}
