package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// AcquireOptions are the fields of an acquire request. Zero values are left out,
// so the server's defaults apply (30s ttl, no wait, not fair, exclusive, no
// owner).
type AcquireOptions struct {
	TTL    time.Duration // lease length; 0 means the server default (leave 0 with Session)
	Wait   time.Duration // how long the request may block for the lock; 0 answers at once
	Fair   bool          // if not granted within Wait, queue and return a Ticket instead of ErrLockHeld
	Owner  string        // a label shown in the lock's state, at most 128 characters
	Lease  string        // re-enter: a lease id already held on this lock
	Shared bool          // a shared hold: shared holds coexist, up to Limit
	Limit  int           // with Shared: the most shared holds at once; 0 for no limit
	// Session is a session id: the hold joins the session and lasts as long as
	// it does.
	Session string
	// IdempotencyKey, when not empty, is sent as the Idempotency-Key header,
	// and makes the request safe to retry: one whose answer is lost is sent
	// again with the same key and body. NewIdempotencyKey makes one. Reuse a
	// key only to retry the same request with the same options (the server
	// answers another body with ErrIdempotencyKeyMismatch).
	IdempotencyKey string
}

type acquireJSON struct {
	TTLms   int64  `json:"ttl_ms,omitempty"`
	WaitMs  int64  `json:"wait_ms,omitempty"`
	Fair    bool   `json:"fair,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Lease   string `json:"lease,omitempty"`
	Shared  bool   `json:"shared,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Session string `json:"session,omitempty"`
}

// Acquire asks for the lock name: one request, as given, that neither renews
// what it gets nor polls a ticket (Lock does both, and is what most programs
// want). It returns a new Lease when granted, the re-entered Lease (Reentered
// set) when o.Lease is given and still held, or a Ticket when o.Fair is set and
// the lock was not granted within o.Wait.
//
// With o.IdempotencyKey, a request whose answer is lost (a transport error, or
// a 502, 503 or 504) is sent again with the same key and body (see
// WithRetryMaxTime), and the server answers the retry with what the first
// request made, so a lost answer never leaves a second hold or an orphan
// behind. Without a key, a retry could take a second hold, so there is none:
// that is what the benchmark and the fault scenarios measure. A re-entry
// (o.Lease) is never deduplicated by the server, so it is never retried.
//
// Errors: a *Problem matching ErrLockHeld (held by someone else after the wait;
// see its TTL, Owner and RetryAfter), ErrLeaseNotHeld (o.Lease is not held),
// ErrSessionNotFound, ErrLimitMismatch (see its Limit), ErrInvalid,
// ErrUnauthorized, ErrForbidden, ErrTooManyWaiters, ErrRateLimited,
// ErrIdempotencyKeyUsed, ErrIdempotencyKeyMismatch or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error, such as ctx's.
func (c *Client) Acquire(ctx context.Context, name string, o AcquireOptions) (*AcquireResult, error) {
	body, err := json.Marshal(acquireJSON{TTLms: millis(o.TTL), WaitMs: millis(o.Wait), Fair: o.Fair, Owner: o.Owner,
		Lease: o.Lease, Shared: o.Shared, Limit: o.Limit, Session: o.Session})
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	res := &AcquireResult{}
	err = c.do(ctx, request{method: http.MethodPost, target: lockPath(name), body: body,
		idemKey: o.IdempotencyKey, retry: o.IdempotencyKey != "" && o.Lease == "",
		decode: func(status int, h http.Header, b []byte) (err error) {
			res.Replayed = h.Get("Idempotent-Replayed") == "true"
			switch status {
			case http.StatusCreated, http.StatusOK:
				res.Reentered = status == http.StatusOK
				res.Lease, err = decodeLease(b)
			case http.StatusAccepted:
				res.Ticket, err = decodeTicket(b)
			default:
				err = unexpected(status)
			}
			return err
		}})
	if err != nil {
		return nil, fmt.Errorf("acquire %q: %w", name, err)
	}
	return res, nil
}

// State returns the lock's state at once. A lock that is not held is a
// LockState with Held false, not an error. Errors: a *Problem matching ErrInvalid
// (a bad name) or ErrUnavailable; ErrUnexpectedResponse; or a transport error.
func (c *Client) State(ctx context.Context, name string) (*LockState, error) {
	return c.watch(ctx, "state", name, 0, nil)
}

// Watch long-polls the lock: it blocks up to wait while the lock is held with
// fence (nil: the fence it has when the request arrives) and returns the state
// as soon as the lock is released, expires or changes hands, or when wait
// elapses. Errors: a *Problem matching ErrInvalid (a bad name, or a wait above
// the server's maximum), ErrTooManyWaiters or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error, such as ctx's.
func (c *Client) Watch(ctx context.Context, name string, wait time.Duration, fence *int64) (*LockState, error) {
	return c.watch(ctx, "watch", name, wait, fence)
}

func (c *Client) watch(ctx context.Context, op, name string, wait time.Duration, fence *int64) (*LockState, error) {
	target := lockPath(name) + waitQuery(wait)
	if fence != nil {
		sep := "?"
		if wait != 0 {
			sep = "&"
		}
		target += sep + "fence=" + strconv.FormatInt(*fence, 10)
	}
	var st *LockState
	err := c.send(ctx, http.MethodGet, target, nil, func(status int, b []byte) (err error) {
		if status != http.StatusOK {
			return unexpected(status)
		}
		st, err = decodeState(b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", op, name, err)
	}
	return st, nil
}

// ForceRelease frees the lock whoever holds it; the next queued ticket, if any,
// is granted. It reports whether a holder was removed (false: the lock was not
// held). Errors: a *Problem matching ErrInvalid or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error.
func (c *Client) ForceRelease(ctx context.Context, name string) (bool, error) {
	var v releasedJSON
	err := c.send(ctx, http.MethodDelete, lockPath(name)+"?force=true", nil, func(status int, b []byte) error {
		if status != http.StatusOK {
			return unexpected(status)
		}
		return unmarshal(b, &v)
	})
	if err != nil {
		return false, fmt.Errorf("force release %q: %w", name, err)
	}
	return v.Released, nil
}
