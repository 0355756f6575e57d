package client

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Lease returns the lease while it is held. Errors: a *Problem matching
// ErrLeaseNotHeld (expired, released, forced or unknown), ErrInvalid or
// ErrUnavailable; ErrUnexpectedResponse; or a transport error.
func (c *Client) Lease(ctx context.Context, name, leaseID string) (*Lease, error) {
	l, err := c.lease(ctx, http.MethodGet, name, leaseID, nil)
	if err != nil {
		return nil, fmt.Errorf("get lease on %q: %w", name, err)
	}
	return l, nil
}

// Renew sets the lease's remaining time to ttl; 0 means the ttl of its last
// grant or renewal. A renewal never revives a lease that ran out. Errors: a
// *Problem matching ErrLeaseNotHeld, ErrInvalid (ttl out of the server's bounds)
// or ErrUnavailable; ErrUnexpectedResponse; or a transport error.
func (c *Client) Renew(ctx context.Context, name, leaseID string, ttl time.Duration) (*Lease, error) {
	var body []byte
	if ttl != 0 {
		body = strconv.AppendInt([]byte(`{"ttl_ms":`), millis(ttl), 10)
		body = append(body, '}')
	}
	l, err := c.lease(ctx, http.MethodPatch, name, leaseID, body)
	if err != nil {
		return nil, fmt.Errorf("renew lease on %q: %w", name, err)
	}
	return l, nil
}

func (c *Client) lease(ctx context.Context, method, name, leaseID string, body []byte) (*Lease, error) {
	var l *Lease
	err := c.send(ctx, method, subPath(name, "leases", leaseID), body, func(status int, b []byte) (err error) {
		if status != http.StatusOK {
			return unexpected(status)
		}
		l, err = decodeLease(b)
		return err
	})
	return l, err
}

// Release gives up one hold of the lease; the lock is freed (or handed to the
// next queued ticket) when the count reaches 0. Errors: a *Problem matching
// ErrLeaseNotHeld, ErrInvalid or ErrUnavailable; ErrUnexpectedResponse; or a
// transport error.
func (c *Client) Release(ctx context.Context, name, leaseID string) (*Released, error) {
	var v releasedJSON
	err := c.send(ctx, http.MethodDelete, subPath(name, "leases", leaseID), nil, func(status int, b []byte) error {
		if status != http.StatusOK {
			return unexpected(status)
		}
		return unmarshal(b, &v)
	})
	if err != nil {
		return nil, fmt.Errorf("release lease on %q: %w", name, err)
	}
	return &Released{Name: v.Name, Count: v.Count, Released: v.Released}, nil
}
