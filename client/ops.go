package client

import (
	"context"
	"fmt"
	"net/http"
)

// Ready reports whether the server is ready: nil when Redis answers and the
// scripts are loaded. Errors: a *Problem matching ErrUnavailable (not ready, or
// shutting down); ErrUnexpectedResponse; or a transport error.
func (c *Client) Ready(ctx context.Context) error {
	if err := c.send(ctx, http.MethodGet, "/readyz", nil, wantOK); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	return nil
}

// Live reports whether the server process runs: nil when it answers. Errors: a
// *Problem for any error status; ErrUnexpectedResponse; or a transport error.
func (c *Client) Live(ctx context.Context) error {
	if err := c.send(ctx, http.MethodGet, "/livez", nil, wantOK); err != nil {
		return fmt.Errorf("livez: %w", err)
	}
	return nil
}

func wantOK(status int, _ []byte) error {
	if status != http.StatusOK {
		return unexpected(status)
	}
	return nil
}
