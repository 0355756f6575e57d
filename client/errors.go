package client

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. A *Problem from the server matches the one of its kind
// through errors.Is; ErrUnexpectedResponse marks answers that break the
// contract; ErrLost and ErrReleased come from a Hold or a Session.
var (
	// ErrLockHeld is a 423 lock-held: someone else holds the lock and the wait
	// elapsed. Lock also returns it, without a *Problem, when a fair wait ran out
	// in the queue.
	ErrLockHeld = errors.New("lock held")
	// ErrLeaseNotHeld is a 404 lease-not-held: the lease expired, was released or
	// forced, or never existed.
	ErrLeaseNotHeld = errors.New("lease not held")
	// ErrTicketGone is a 410 ticket-gone: the ticket expired, was cancelled or is unknown.
	ErrTicketGone = errors.New("ticket gone")
	// ErrTooManyWaiters is a 429 too-many-waiters: the server (or the API key)
	// holds its maximum of long-polls.
	ErrTooManyWaiters = errors.New("too many waiters")
	// ErrRateLimited is a 429 rate-limited: the API key is over its rate.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnavailable is a 503 store-unavailable: Redis is unreachable or the
	// server is shutting down. A 503 overloaded matches it too (as every 503
	// does): both mean "nothing was done, try again after RetryAfter".
	ErrUnavailable = errors.New("store unavailable")
	// ErrOverloaded is a 503 overloaded: Redis answers, but the server has more
	// calls to it waiting than its bounds allow, and did nothing. It also
	// matches ErrUnavailable.
	ErrOverloaded = errors.New("overloaded")
	// ErrInvalid is a 400, invalid-request or invalid-name: the request itself is wrong.
	ErrInvalid = errors.New("invalid request")
	// ErrUnauthorized is a 401 unauthorized: no API key, or one the server does
	// not know (see WithAPIKey and BATON_API_KEY).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden is a 403 forbidden: the API key may not do this on this lock.
	ErrForbidden = errors.New("forbidden")
	// ErrSessionNotFound is a 404 session-not-found: the session expired, was
	// ended, or never existed.
	ErrSessionNotFound = errors.New("session not found")
	// ErrLimitMismatch is a 409 limit-mismatch: the lock's shared holds have
	// another limit (the *Problem's Limit).
	ErrLimitMismatch = errors.New("limit mismatch")
	// ErrIdempotencyKeyUsed is a 409 idempotency-key-used: what the first request
	// with this Idempotency-Key made has ended.
	ErrIdempotencyKeyUsed = errors.New("idempotency key used")
	// ErrIdempotencyKeyMismatch is a 422 idempotency-key-mismatch: the key was
	// used with another body.
	ErrIdempotencyKeyMismatch = errors.New("idempotency key mismatch")
	// ErrUnexpectedResponse is a success status the endpoint never answers with,
	// or a body that is not the JSON the contract describes.
	ErrUnexpectedResponse = errors.New("unexpected response")

	// ErrLost is a hold (or session) that ended without Unlock (or Close): its
	// lease was found not held, a renewal was refused, or renewals kept failing
	// until the lease ran out. The error wraps the cause too.
	ErrLost = errors.New("lock lost")
	// ErrReleased is a second Unlock of a Hold, or a call on a Session after Close.
	ErrReleased = errors.New("already released")
)

// Problem is an RFC 9457 problem the server answered with (any status of 400 or
// more). It matches the sentinel errors through errors.Is: by its Type when it
// has one (a Type ending in /problems/<kind>), and by Status otherwise, so that a
// bare 503 from a proxy in front of Baton is ErrUnavailable too.
type Problem struct {
	Type   string            // "/problems/<kind>"; empty when the body was not a problem
	Title  string            // a short summary of the kind
	Status int               // the HTTP status
	Detail string            // what went wrong with this request
	Errors map[string]string // on 400 invalid-request: field or parameter -> message

	// On 423 lock-held: the holder's remaining time, its owner label and the
	// number of queued tickets.
	TTL     time.Duration
	Owner   string
	Waiters int

	// On 409 limit-mismatch: the lock's limit; 0 when its shared holds have none.
	Limit int

	RetryAfter time.Duration // the Retry-After header (423, 429, 503); 0 if absent
	RequestID  string        // the X-Request-Id header, for finding the request in the server's log
}

// Error says the kind, the status and the detail.
func (p *Problem) Error() string {
	kind := p.Type
	if i := strings.LastIndex(kind, "/problems/"); i >= 0 {
		kind = kind[i+len("/problems/"):]
	}
	if kind == "" || kind == "about:blank" {
		kind = strings.ToLower(http.StatusText(p.Status))
	}
	s := kind + " (" + strconv.Itoa(p.Status) + ")"
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	return s
}

// Is reports whether target is the sentinel error for p's kind.
func (p *Problem) Is(target error) bool {
	switch target {
	case ErrLockHeld:
		return p.match(http.StatusLocked, "lock-held")
	case ErrLeaseNotHeld:
		return p.match(http.StatusNotFound, "lease-not-held")
	case ErrTicketGone:
		return p.match(http.StatusGone, "ticket-gone")
	case ErrTooManyWaiters:
		return p.match(http.StatusTooManyRequests, "too-many-waiters")
	case ErrRateLimited:
		return p.typed("rate-limited")
	case ErrUnauthorized:
		return p.match(http.StatusUnauthorized, "unauthorized")
	case ErrForbidden:
		return p.match(http.StatusForbidden, "forbidden")
	case ErrSessionNotFound:
		return p.typed("session-not-found")
	case ErrLimitMismatch:
		return p.typed("limit-mismatch")
	case ErrIdempotencyKeyUsed:
		return p.typed("idempotency-key-used")
	case ErrIdempotencyKeyMismatch:
		return p.typed("idempotency-key-mismatch")
	case ErrUnavailable:
		return p.match(http.StatusServiceUnavailable, "store-unavailable", "overloaded")
	case ErrOverloaded:
		return p.typed("overloaded")
	case ErrInvalid:
		return p.match(http.StatusBadRequest, "invalid-request", "invalid-name")
	}
	return false
}

// match matches by kind, or by status when the problem has no type.
func (p *Problem) match(status int, kinds ...string) bool {
	if p.Type == "" || p.Type == "about:blank" {
		return p.Status == status
	}
	return p.typed(kinds...)
}

// typed matches by kind only: kinds that share a status with another (404,
// 409, 429) cannot be told apart by status.
func (p *Problem) typed(kinds ...string) bool {
	for _, k := range kinds {
		if strings.HasSuffix(p.Type, "/problems/"+k) {
			return true
		}
	}
	return false
}

// problemJSON is the wire form of a problem, the lock-held fields included.
type problemJSON struct {
	Type    string            `json:"type"`
	Title   string            `json:"title"`
	Detail  string            `json:"detail"`
	Errors  map[string]string `json:"errors"`
	TTLms   int64             `json:"ttl_ms"`
	Owner   string            `json:"owner"`
	Waiters int               `json:"waiters"`
	Limit   *int              `json:"limit"`
}

// newProblem builds the *Problem of an error response. A body that is not a JSON
// problem (from a proxy, say) still gives a Problem with the status.
func newProblem(resp *http.Response, body []byte) *Problem {
	p := &Problem{
		Status:     resp.StatusCode,
		RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
		RequestID:  resp.Header.Get("X-Request-Id"),
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var pj problemJSON
	if (mt == "application/json" || strings.HasSuffix(mt, "+json")) && json.Unmarshal(body, &pj) == nil {
		p.Type, p.Title, p.Detail, p.Errors = pj.Type, pj.Title, pj.Detail, pj.Errors
		p.TTL, p.Owner, p.Waiters = time.Duration(pj.TTLms)*time.Millisecond, pj.Owner, pj.Waiters
		if pj.Limit != nil {
			p.Limit = *pj.Limit
		}
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	return p
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}
