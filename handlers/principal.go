package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/store"
)

// Access control (API.md, "Access control"): every route but /livez, /readyz and
// /openapi.yaml is wrapped by need with the action it takes (the table is
// routes.go itself). need authenticates the request (a Bearer key, a client
// certificate, or a loopback peer in protected mode), applies the key's rate
// limit, checks its grants over the route's lock name, and puts the principal
// in the request's context. Handlers see the principal, never a key; the store
// sees only the principal's id, which every hold, ticket and session carries.

// reqInfo is what the middleware learns about a request for the access log and
// metrics, which run outside it.
type reqInfo struct {
	principal string
	bodySum   string    // the SHA-256 of the request body (decodeJSON)
	bodyRead  bool      // decodeJSON read the body to its end
	start     time.Time // when observe saw the request
	parked    bool      // its connection parked: serveWait logs it when answered
}

// bodySum is the hash of the request's body, once decodeJSON has read it.
func bodySum(r *http.Request) string {
	if info, _ := r.Context().Value(reqInfoKey{}).(*reqInfo); info != nil {
		return info.bodySum
	}
	return ""
}

type reqInfoKey struct{}

// infoOf is the request's reqInfo, or nil outside observe.
func infoOf(r *http.Request) *reqInfo {
	info, _ := r.Context().Value(reqInfoKey{}).(*reqInfo)
	return info
}

type principalKey struct{}

func withInfo(r *http.Request, start time.Time) (*http.Request, *reqInfo) {
	info := &reqInfo{principal: auth.Anonymous, start: start}
	return r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info)), info
}

// principalOf is the request's principal, or nil before need ran.
func principalOf(r *http.Request) *auth.Principal {
	p, _ := r.Context().Value(principalKey{}).(*auth.Principal)
	return p
}

// principalID is the id the store binds holds, tickets and sessions to.
func principalID(r *http.Request) string {
	if p := principalOf(r); p != nil {
		return p.ID()
	}
	return ""
}

// capsOf is the request's principal's caps on live objects, for the store;
// none before need ran.
func capsOf(r *http.Request) store.Caps {
	p := principalOf(r)
	if p == nil {
		return store.Caps{}
	}
	c := p.Caps()
	return store.Caps{Holds: c.Holds, Tickets: c.Tickets, Sessions: c.Sessions}
}

// keyCapError turns the store's *CapError into the 429 that names the key,
// the cap and where it is set; other errors pass through.
func keyCapError(r *http.Request, err error) error {
	var ce *store.CapError
	p := principalOf(r)
	if p == nil || !errors.As(err, &ce) {
		return err
	}
	own := p.OwnCaps()
	field, own1 := "max_holds", own.Holds
	switch ce.Kind {
	case store.KindTickets:
		field, own1 = "max_tickets", own.Tickets
	case store.KindSessions:
		field, own1 = "max_sessions", own.Sessions
	}
	env := "BATON_KEY_" + strings.ToUpper(field)
	where := "its " + field + " in the keys file"
	switch {
	case p.All():
		where = env + ", which caps every client of this mode together"
	case own1 == 0:
		where = env + ", the server's " + field + " for keys that set none"
	}
	return &objectCapError{principal: p.Name(), builtin: p.All(), kind: ce.Kind, limit: ce.Limit, where: where, after: ce.RetryAfter}
}

// objectCapError: the key has as many live holds, tickets or sessions as its
// cap allows.
type objectCapError struct {
	principal string
	builtin   bool // protected or off mode's principal, not a key
	kind      string
	limit     int
	where     string
	after     time.Duration
}

func (e *objectCapError) Error() string {
	return fmt.Sprintf("key %q has its %d live %s", e.principal, e.limit, e.kind)
}

// detail is the 429's detail: which key, which cap, how big, where it is set.
func (e *objectCapError) detail() string {
	who := fmt.Sprintf("API key %q", e.principal)
	if e.builtin {
		who = fmt.Sprintf("This server's clients (%s)", e.principal)
	}
	return fmt.Sprintf("%s already has %d live %s, its cap (%s); release some, or let them end, and retry after Retry-After seconds.",
		who, e.limit, e.kind, e.where)
}

// Errors of access control, for the problem writer.
var (
	errUnauthorized = auth.ErrUnauthorized
	errForbidden    = auth.ErrForbidden
)

// rateLimited is a 429 rate-limited with its Retry-After.
type rateLimited struct{ after time.Duration }

func (e *rateLimited) Error() string { return "rate limited" }

// need wraps a route's handler with access control for action a.
func (s *server) need(a auth.Action, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := auth.Anyone()
		if s.guard != nil {
			var err error
			if p, err = s.guard.Authenticate(r); err != nil {
				s.refusals.unauthorized(r, err)
				w.Header().Set("WWW-Authenticate", auth.Challenge)
				s.fail(w, r, err)
				return
			}
		}
		if info, _ := r.Context().Value(reqInfoKey{}).(*reqInfo); info != nil {
			info.principal = p.Name()
		}
		if ok, after := p.Allow(); !ok {
			s.fail(w, r, &rateLimited{after: after})
			return
		}
		if err := s.authorize(r, p, a); err != nil {
			s.audit(r, p.Name(), "forbidden", err)
			s.fail(w, r, err)
			return
		}
		if hasBody(r) && !jsonMediaType(r.Header.Get("Content-Type")) { // on routes that read none too
			s.fail(w, r, errUnsupportedMedia)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authorize checks the principal's grants for action a on the route's lock
// name. A name that is no lock name is left to the handler (400 invalid-name),
// unless the principal can do a on no lock at all.
func (s *server) authorize(r *http.Request, p *auth.Principal, a auth.Action) error {
	if a == auth.ActionMetrics {
		if !p.CanMetrics() {
			return &auth.ForbiddenError{Principal: p.Name(), Action: a}
		}
		return nil
	}
	name, err := lockName(r)
	if chi.URLParam(r, "name") == "" || err != nil { // sessions, or a bad name
		if !p.CanAny(a) {
			return &auth.ForbiddenError{Principal: p.Name(), Action: a}
		}
		return nil
	}
	return p.Authorize(a, name)
}

// audit logs a refusal (403) or a force release with who, where from and
// which route; 401s go through s.refusals.
func (s *server) audit(r *http.Request, principal, what string, err error) {
	auditLine(s.log, r, principal, what, err)
}

// waitSlot counts a long-poll against the principal's max_waiters for as long
// as it waits; release must be called when it ends. Errors: *keyWaitersError.
func waitSlot(r *http.Request, wait time.Duration) (release func(), err error) {
	p := principalOf(r)
	if wait <= 0 || p == nil {
		return func() {}, nil
	}
	if !p.AcquireWaiter() {
		n, byDefault := p.MaxWaiters()
		return nil, &keyWaitersError{principal: p.Name(), max: n, byDefault: byDefault}
	}
	return p.ReleaseWaiter, nil
}

// keyWaitersError: the key's long-polls in this process are at its
// max_waiters (its own, or the server's default for keys without one).
type keyWaitersError struct {
	principal string
	max       int
	byDefault bool
}

func (e *keyWaitersError) Error() string {
	return fmt.Sprintf("key %q holds its %d waiting requests", e.principal, e.max)
}

// detail is the 429's detail: which cap, how big, and where it is set.
func (e *keyWaitersError) detail() string {
	where := "its max_waiters in the keys file"
	if e.byDefault {
		where = "BATON_KEY_MAX_WAITERS, the server's max_waiters for keys that set none"
	}
	return fmt.Sprintf("API key %q already has %d waiting requests (long-polls) on this server, its limit (%s); "+
		"retry after Retry-After seconds, or wait less at once.", e.principal, e.max, where)
}
