// Package client is a typed Go client for Baton's HTTP API v1 (see
// api/openapi.yaml): a lock you hold and keep (Lock, Hold, Session), and below
// it one method per endpoint (Acquire, Renew, Release, Poll, State, Watch,
// CreateSession ...), durations as time.Duration, and errors that are *Problem
// values matching the package's sentinel errors through errors.Is.
//
// Typical use:
//
//	c := client.New("") // BATON_URL, else http://localhost:8080; the key from BATON_API_KEY
//	h, err := c.Lock(ctx, "reports", client.LockOptions{TTL: 30 * time.Second, Wait: 10 * time.Second})
//	if errors.Is(err, client.ErrLockHeld) {
//		// someone else holds it; err's *Problem says who, for how long (Owner, TTL, RetryAfter)
//	}
//	if err != nil {
//		return err
//	}
//	defer h.Unlock(ctx)
//	// ... work, passing h.Fence() to the systems you write to, and stopping
//	// when <-h.Lost() fires ...
//
// Lock renews the lease at a third of its ttl until Unlock. A renewal that
// answers 404 (the lease ran out, or was taken by force) loses the hold at once:
// Lost() closes, renewal stops and Unlock says ErrLost. A renewal that fails for
// a passing reason (no answer, a 503) is retried with backoff while the lease
// lasts. Each Hold renews only its own lease, so nothing it does can reach a
// later hold of the same lock. NewSession keeps many holds alive with one
// heartbeat, and Session.Close releases them all.
//
// Every POST that Lock and NewSession send carries an Idempotency-Key, and one
// whose answer was lost (a transport error, a 502, 503 or 504) is sent again
// with the same key and body, so a lost answer never leaves a second hold,
// ticket or session behind (see WithRetryMaxTime). A refusal (400, 401, 403,
// 409, 423) is returned at once. The one-request methods (Acquire,
// CreateSession) do the same when given a key (NewIdempotencyKey), and
// otherwise send exactly one request, as the benchmark and the fault
// scenarios need.
//
// A Client is safe for concurrent use and is meant to be shared: its default
// transport keeps many idle connections to the one server it talks to, so that
// thousands of concurrent long-polls and acquires reuse connections. No call has
// a client-side timeout of its own; bound each one with its context (long-polls
// are also bounded by their wait).
package client
