package auth

import (
	"errors"
	"fmt"
)

// ErrUnauthorized is matched (errors.Is) by every authentication failure: no key,
// a malformed Authorization header, an unknown key, or a peer that protected mode
// does not serve. The HTTP layer answers 401 with the WWW-Authenticate header
// [Challenge] and the error's message as the detail: it is safe to show.
var ErrUnauthorized = errors.New("unauthorized")

// ErrForbidden is matched by the error [Principal.Authorize] returns for an action
// outside the principal's grants (403).
var ErrForbidden = errors.New("forbidden")

// ErrNotLoopback is the authentication failure of protected mode: the TCP peer is
// not a loopback address. It matches ErrUnauthorized; its message tells the
// operator how to serve other clients.
var ErrNotLoopback error = &AuthError{Reason: "this Baton serves only loopback clients until access control is configured: " +
	"set BATON_AUTH_FILE to a keys file (make keys with `baton keygen NAME`), or BATON_AUTH=off to serve everyone"}

// Challenge is the WWW-Authenticate value of every 401.
const Challenge = `Bearer realm="baton"`

// Anonymous is how audit logs name a request that has no principal.
const Anonymous = "anonymous"

// AuthError is an authentication failure. Reason says what was wrong with the
// request in words safe to show its client; it never repeats the key.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string { return e.Reason }

// Unwrap makes every AuthError match ErrUnauthorized.
func (e *AuthError) Unwrap() error { return ErrUnauthorized }

// ForbiddenError is an action outside a principal's grants.
type ForbiddenError struct {
	Principal string
	Action    Action
	Name      string // the lock name; empty for metrics and sessions
}

func (e *ForbiddenError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("key %q has no %q grant", e.Principal, e.Action.String())
	}
	return fmt.Sprintf("key %q has no %q grant for lock %q", e.Principal, e.Action.String(), e.Name)
}

// Unwrap makes every ForbiddenError match ErrForbidden.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }
