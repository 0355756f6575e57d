package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// The names of the built-in principals. Neither can be a key's name (keys'
// names have no '@'), so a hold made in one mode is never another key's.
const (
	LoopbackName = "@loopback" // protected mode: a client on a loopback address
	AnyoneName   = "@anyone"   // BATON_AUTH=off: every client
)

// Principal is who a request acts for: a key of the keys file, or one of the
// built-in principals of protected and off mode, which have every right. A
// Principal is immutable; its rate limiter and long-poll count live on across
// reloads for as long as the keys file keeps its name.
type Principal struct {
	name       string
	id         string
	all        bool
	grants     []Grant
	rt         *runtime
	maxWaiters int // 0: none
	// waitersByDefault: maxWaiters is the server's default for keys that set
	// no max_waiters (Config.KeyMaxWaiters).
	waitersByDefault bool
	caps             Caps // in force: the key's own, else the server's default
	ownCaps          Caps // the key's own max_holds, max_tickets, max_sessions
}

var (
	loopback = newBuiltin(LoopbackName)
	anyone   = newBuiltin(AnyoneName)
)

// Loopback returns the principal of protected mode's loopback clients.
func Loopback() *Principal { return loopback }

// Anyone returns the principal of every client when BATON_AUTH=off.
func Anyone() *Principal { return anyone }

func newBuiltin(name string) *Principal {
	return &Principal{name: name, id: PrincipalID(name), all: true, rt: newRuntime()}
}

// newPrincipal makes the principal of a key entry with runtime state rt; a
// cap the entry leaves out is def's.
func newPrincipal(k Key, rt *runtime, def Caps) *Principal {
	rt.configure(k.RatePerS, k.MaxWaiters)
	own := Caps{Holds: k.MaxHolds, Tickets: k.MaxTickets, Sessions: k.MaxSessions}
	return &Principal{name: k.Name, id: PrincipalID(k.Name), grants: slices.Clone(k.Allow), rt: rt, maxWaiters: k.MaxWaiters,
		ownCaps: own, caps: own.or(def)}
}

// withCaps is a built-in principal with caps c: itself without caps, else a
// copy sharing its runtime.
func (p *Principal) withCaps(c Caps) *Principal {
	if c == (Caps{}) {
		return p
	}
	q := *p
	q.caps = c
	return &q
}

// PrincipalID returns the store's name for a principal: the hex of the first 16
// bytes of the SHA-256 of its name.
func PrincipalID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:16])
}

// Name returns the principal's name, for logs, metrics and audit: a key's name in
// the keys file, or LoopbackName or AnyoneName.
func (p *Principal) Name() string { return p.name }

// ID returns PrincipalID(p.Name()), which the store keeps with every hold, ticket
// and session the principal makes.
func (p *Principal) ID() string { return p.id }

// All reports whether the principal has every right (the built-in principals).
func (p *Principal) All() bool { return p.all }

// Grants returns a copy of the principal's grants (none for the built-in ones,
// which need none).
func (p *Principal) Grants() []Grant { return slices.Clone(p.grants) }

// Can reports whether the principal may do a on the lock name. ActionMetrics is
// not tied to names: Can(ActionMetrics, anything) is CanMetrics().
func (p *Principal) Can(a Action, name string) bool {
	if p.all {
		return true
	}
	if a == ActionMetrics {
		return p.CanAny(a)
	}
	for _, g := range p.grants {
		if g.Allows(a, name) {
			return true
		}
	}
	return false
}

// CanAny reports whether the principal may do a on some lock name: what routes
// that name no lock need (sessions need CanAny(ActionLock)).
func (p *Principal) CanAny(a Action) bool {
	if p.all {
		return true
	}
	for _, g := range p.grants {
		if g.set.has(a) {
			return true
		}
	}
	return false
}

// CanMetrics reports whether the principal may read /metrics.
func (p *Principal) CanMetrics() bool { return p.CanAny(ActionMetrics) }

// Authorize returns nil when the principal may do a on the lock name, and a
// *ForbiddenError (matching ErrForbidden) naming the principal, the action and
// the lock when it may not. An empty name asks CanAny(a).
func (p *Principal) Authorize(a Action, name string) error {
	ok := p.Can(a, name)
	if name == "" {
		ok = p.CanAny(a)
	}
	if ok {
		return nil
	}
	return &ForbiddenError{Principal: p.name, Action: a, Name: name}
}
