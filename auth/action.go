package auth

import (
	"fmt"
	"strings"
)

// Action is what a request does, as the keys file names it.
type Action uint8

// The actions of the keys file. ActionAdmin includes ActionLock and ActionRead;
// ActionMetrics is not tied to lock names.
const (
	ActionLock Action = 1 << iota
	ActionRead
	ActionAdmin
	ActionMetrics
)

// actionNames lists the actions in the order the docs and keygen print them.
var actionNames = []struct {
	a    Action
	name string
}{{ActionLock, "lock"}, {ActionRead, "read"}, {ActionAdmin, "admin"}, {ActionMetrics, "metrics"}}

// String returns the action's name in the keys file ("lock", "read", ...).
func (a Action) String() string {
	for _, n := range actionNames {
		if n.a == a {
			return n.name
		}
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// ParseAction returns the action named s. It returns an error naming the known
// actions when s is none of them.
func ParseAction(s string) (Action, error) {
	for _, n := range actionNames {
		if n.name == s {
			return n.a, nil
		}
	}
	return 0, fmt.Errorf("unknown action %s (known: lock, read, admin, metrics)", show(s))
}

// actionSet is a set of actions, one bit each.
type actionSet uint8

// with returns the set with a added, and what a implies (admin: lock and read).
func (s actionSet) with(a Action) actionSet {
	s |= actionSet(a)
	if a == ActionAdmin {
		s |= actionSet(ActionLock | ActionRead)
	}
	return s
}

func (s actionSet) has(a Action) bool { return s&actionSet(a) != 0 }

// list returns the set's actions in their documented order.
func (s actionSet) list() []Action {
	var out []Action
	for _, n := range actionNames {
		if s.has(n.a) {
			out = append(out, n.a)
		}
	}
	return out
}

func (s actionSet) String() string {
	var names []string
	for _, a := range s.list() {
		names = append(names, a.String())
	}
	return strings.Join(names, ",")
}
