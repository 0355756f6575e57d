package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/store"
)

// problem is an RFC 9457 body. The lock-held fields appear only on 423.
type problem struct {
	Type    string            `json:"type"`
	Title   string            `json:"title"`
	Status  int               `json:"status"`
	Detail  string            `json:"detail"`
	Errors  map[string]string `json:"errors,omitempty"`
	TTLms   *int64            `json:"ttl_ms,omitempty"`
	Owner   *string           `json:"owner,omitempty"`
	Waiters *int              `json:"waiters,omitempty"`
	// Limit is the lock's limit on a 409 limit-mismatch: a number, or null.
	Limit any `json:"limit,omitempty"`
}

// Errors the HTTP layer itself raises; everything else comes from the store.
var (
	errInvalidName      = errors.New("invalid lock name")
	errUnsupportedMedia = errors.New("unsupported media type")
	errNotFound         = errors.New("no such route")
	errMethodNotAllowed = errors.New("method not allowed")
	// errHeldUnseen is a 423 for a key without read on the lock: its owner,
	// ttl and waiters are what GET would show, which that key gets 403 for.
	errHeldUnseen = errors.New("lock held")
)

// validationError is a 400 invalid-request; fields maps each bad field to why.
type validationError struct {
	detail string
	fields map[string]string
}

func (e *validationError) Error() string { return "invalid request: " + e.detail }

func invalid(field, msg string) *validationError {
	return &validationError{detail: "The request has invalid fields.", fields: map[string]string{field: msg}}
}

// writeError is the one place that turns an error into a status and a problem
// body. Only internal errors are logged in full; Redis trouble is logged as a
// warning without the client's request details.
func writeError(w http.ResponseWriter, log *zerolog.Logger, err error) {
	p := problem{}
	var verr *validationError
	var held *store.HeldError
	var limit *store.LimitError
	var limited *rateLimited
	var tooLarge *http.MaxBytesError
	var keyWaiters *keyWaitersError
	var objectCap *objectCapError
	switch {
	case errors.As(err, &verr):
		p = kind("invalid-request", 400, "Invalid request", verr.detail)
		p.Errors = verr.fields
	case errors.Is(err, errInvalidName):
		p = kind("invalid-name", 400, "Invalid lock name",
			"Lock names are 1 to 200 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', other than '.' and '..'.")
	case errors.Is(err, errBodyTimeout):
		p = kind("request-timeout", 408, "Request timeout", "The request body did not arrive in time; send it at once after the headers.")
		w.Header().Set("Connection", "close") // what is left of the body can not be told from a next request
	case errors.As(err, &tooLarge):
		p = kind("body-too-large", 413, "Body too large", "Request bodies are limited to 16 KiB.")
	case errors.Is(err, errUnsupportedMedia):
		p = kind("unsupported-media-type", 415, "Unsupported media type",
			"A request body must be JSON sent with Content-Type: application/json (curl: --json '{...}', or "+
				"-H 'Content-Type: application/json' -d '{...}'); a body without one is refused, even a blank one. "+
				"Send no body at all for all defaults.")
	case errors.Is(err, store.ErrLeaseNotHeld):
		p = kind("lease-not-held", 404, "Lease not held",
			"This lease is not held: it expired, was released, was taken by force, or never existed.")
	case errors.As(err, &limit):
		p = kind("limit-mismatch", 409, "Limit mismatch",
			"Every shared holder of a lock must ask for the same limit; the lock's shared holds have another one (see limit).")
		p.Limit = json.RawMessage("null")
		if limit.Limit > 0 {
			p.Limit = limit.Limit
		}
	case errors.Is(err, store.ErrModeMismatch):
		p = kind("invalid-request", 400, "Invalid request", "The request has invalid fields.")
		p.Errors = map[string]string{"shared": "does not match the hold's mode: a re-entry keeps its mode (there is no upgrade from shared to exclusive)"}
	case errors.Is(err, store.ErrTicketGone):
		p = kind("ticket-gone", 410, "Ticket gone",
			"This ticket is no longer queued: it expired, was cancelled, or never existed.")
	case errors.As(err, &held):
		p = kind("lock-held", 423, "Lock held", "The lock is held by someone else and was not granted within wait_ms.")
		ttl := held.TTL.Milliseconds()
		p.TTLms, p.Owner, p.Waiters = &ttl, &held.Owner, &held.Waiters
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, (ttl+999)/1000), 10))
	case errors.Is(err, errHeldUnseen):
		p = kind("lock-held", 423, "Lock held", "The lock is held by someone else and was not granted within wait_ms. "+
			"Its holder, time left and queue are shown only to keys that may read the lock.")
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, errUnauthorized):
		p = kind("unauthorized", 401, "Unauthorized", err.Error())
		// A client without a valid key keeps no connection: thousands held
		// open after their 401 cost a goroutine and buffers each until the
		// idle timeout.
		w.Header().Set("Connection", "close")
	case errors.Is(err, errForbidden):
		p = kind("forbidden", 403, "Forbidden", err.Error()+".")
	case errors.As(err, &limited):
		p = kind("rate-limited", 429, "Rate limited", "This API key is over its rate_per_s; retry after Retry-After seconds.")
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(limited.after.Seconds())), 10))
	case errors.As(err, &objectCap):
		p = kind("too-many-objects", 429, "Too many live objects", objectCap.detail())
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64((objectCap.after+time.Second-1)/time.Second)), 10))
	case errors.As(err, &keyWaiters):
		p = kind("too-many-waiters", 429, "Too many waiters", keyWaiters.detail())
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, store.ErrSessionNotFound):
		p = kind("session-not-found", 404, "Session not found",
			"This session is not there: it expired, was deleted, or never existed.")
	case errors.Is(err, store.ErrIdempotencyUsed):
		p = kind("idempotency-key-used", 409, "Idempotency key used",
			"What the first request with this Idempotency-Key made has ended (released, expired, forced or cancelled); use a new key for a new request.")
	case errors.Is(err, store.ErrIdempotencyMismatch):
		p = kind("idempotency-key-mismatch", 422, "Idempotency key mismatch",
			"This Idempotency-Key was used with another request body; a retry must send the same body.")
	case errors.Is(err, store.ErrTooManyWaiters):
		p = kind("too-many-waiters", 429, "Too many waiters",
			"This server holds its maximum number of waiting requests (long-polls), BATON_MAX_WAITERS, for all clients together; retry shortly.")
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, store.ErrOverloaded):
		p = kind("overloaded", 503, "Overloaded",
			"This server has more calls to the lock store waiting than it takes at once; nothing was done. Retry after Retry-After seconds.")
		w.Header().Set("Retry-After", overloadedRetryAfter())
		warnOverloaded(log, err)
	case errors.Is(err, store.ErrUnavailable):
		p = kind("store-unavailable", 503, "Store unavailable",
			"The lock store cannot be reached, or the server is shutting down; retry shortly.")
		w.Header().Set("Retry-After", "1")
		if errors.Is(err, context.Canceled) {
			log.Debug().Err(err).Msg("client went away") // nobody reads this answer
		} else {
			log.Warn().Err(err).Msg("store unavailable")
		}
	case errors.Is(err, errNotFound):
		p = kind("not-found", 404, "Not found", "No such resource; see /openapi.yaml for the API.")
	case errors.Is(err, errMethodNotAllowed):
		p = kind("method-not-allowed", 405, "Method not allowed", "This resource does not support this method; see the Allow header.")
	default:
		p = kind("internal", 500, "Internal error", "Something went wrong on our side; the request id identifies it in our logs.")
		log.Error().Err(err).Msg("internal error")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// overloadedRetryAfter is an overloaded answer's Retry-After: 1 to 3 s, drawn
// anew for each, so that the clients of a burst do not all come back together.
func overloadedRetryAfter() string { return strconv.Itoa(1 + rand.IntN(3)) }

// lastOverloadedWarn is the unix ms of the latest overloaded warning: a burst
// is refused thousands of times a second, and is warned of once a second.
var lastOverloadedWarn atomic.Int64

func warnOverloaded(log *zerolog.Logger, err error) {
	now := time.Now().UnixMilli()
	last := lastOverloadedWarn.Load()
	if now-last < 1000 || !lastOverloadedWarn.CompareAndSwap(last, now) {
		return
	}
	log.Warn().Err(err).Msg("overloaded: refused a request before it reached Redis (warned at most once a second; counted in baton_overloaded_total)")
}

func kind(name string, status int, title, detail string) problem {
	return problem{Type: "/problems/" + name, Title: title, Status: status, Detail: detail}
}

// writeJSON writes a success body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
