// Package client is a typed Go client for Baton's HTTP API v1 (see api/openapi.yaml):
// one method per endpoint, durations as time.Duration, and errors that are
// *Problem values matching the package's sentinel errors through errors.Is.
//
// A Client is safe for concurrent use and is meant to be shared: its default
// transport keeps many idle connections to the one server it talks to, so that
// thousands of concurrent long-polls and acquires reuse connections. No call has
// a client-side timeout of its own; bound each one with its context (long-polls
// are also bounded by their wait).
//
// Typical use:
//
//	c := client.New("http://localhost:8080")
//	res, err := c.Acquire(ctx, "invoices:2024-06", client.AcquireOptions{TTL: 30 * time.Second, Wait: 5 * time.Second})
//	if errors.Is(err, client.ErrLockHeld) {
//		// someone else holds it; err's *Problem says for how long (TTL, RetryAfter)
//	}
//	if err != nil {
//		return err
//	}
//	defer c.Release(ctx, "invoices:2024-06", res.Lease.ID)
//	// ... work, passing res.Lease.Fence to the systems you write to ...
package client
