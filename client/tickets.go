package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Poll waits up to wait for the ticket to be granted. It returns the Lease once
// granted, or the Ticket with its current position while still queued; poll
// again within the ticket's TicketTTL to keep it. Errors: a *Problem matching
// ErrTicketGone (expired, cancelled or unknown), ErrInvalid, ErrTooManyWaiters
// or ErrUnavailable; ErrUnexpectedResponse; or a transport error, such as ctx's.
func (c *Client) Poll(ctx context.Context, name, ticketID string, wait time.Duration) (*PollResult, error) {
	res := &PollResult{}
	err := c.send(ctx, http.MethodGet, subPath(name, "tickets", ticketID)+waitQuery(wait), nil, func(status int, b []byte) (err error) {
		switch status {
		case http.StatusOK:
			res.Lease, err = decodeLease(b)
		case http.StatusAccepted:
			res.Ticket, err = decodeTicket(b)
		default:
			err = unexpected(status)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("poll ticket on %q: %w", name, err)
	}
	return res, nil
}

// Cancel leaves the queue; a grant made to the ticket and not yet claimed passes
// on. Errors: a *Problem matching ErrTicketGone, ErrInvalid or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error.
func (c *Client) Cancel(ctx context.Context, name, ticketID string) error {
	err := c.send(ctx, http.MethodDelete, subPath(name, "tickets", ticketID), nil, func(status int, _ []byte) error {
		if status != http.StatusNoContent {
			return unexpected(status)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cancel ticket on %q: %w", name, err)
	}
	return nil
}
