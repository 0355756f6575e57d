package main

import (
	"testing"

	"github.com/batonhq/baton/auth"
)

// The keys file validates, and each principal's grants cover what the runner
// does with its key, and no more.
func TestWriteKeys(t *testing.T) {
	path, keys, err := writeKeys(t.TempDir(), "net-reset")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := auth.ReadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(principals) || len(keys) != len(principals) {
		t.Fatalf("%d entries, %d keys, want %d each", len(entries), len(keys), len(principals))
	}
	can := func(p string, a auth.Action, name string) bool {
		for _, e := range entries {
			if e.Name != p {
				continue
			}
			if e.SHA256 != auth.KeySHA256(keys[p]) {
				t.Fatalf("%s: the file's hash is not its key's", p)
			}
			for _, g := range e.Allow {
				if g.Allows(a, name) {
					return true
				}
			}
		}
		return false
	}
	tests := []struct {
		principal string
		action    auth.Action
		name      string
		want      bool
	}{
		{appA, auth.ActionLock, "net-reset-3", true},
		{appA, auth.ActionRead, "net-reset-race-1", true},
		{appA, auth.ActionLock, "probe-1", false},
		{appB, auth.ActionLock, "net-reset-0", true},
		{appB, auth.ActionRead, "net-reset-0", true},
		{appB, auth.ActionAdmin, "net-reset-0", false},
		{watchPrincipal, auth.ActionRead, "net-reset-0", true},
		{watchPrincipal, auth.ActionLock, "net-reset-0", false},
		{runnerPrincipal, auth.ActionAdmin, "probe-7", true},
		{runnerPrincipal, auth.ActionMetrics, "", true},
	}
	for _, tt := range tests {
		if got := can(tt.principal, tt.action, tt.name); got != tt.want {
			t.Errorf("%s may %s %q: %v, want %v", tt.principal, tt.action, tt.name, got, tt.want)
		}
	}
}
