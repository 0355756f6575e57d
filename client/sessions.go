package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SessionOptions are the fields of a new session. Zero values are left out, so
// the server's defaults apply.
type SessionOptions struct {
	TTL   time.Duration // the session's ttl, shared by its holds; 0 means the server default
	Owner string        // a label, at most 128 characters
	// IdempotencyKey, when not empty, is sent as the Idempotency-Key header and
	// makes CreateSession retry a lost answer with it (NewSession always sends
	// one).
	IdempotencyKey string
}

// SessionInfo is a session as the server describes it.
type SessionInfo struct {
	ID        string        // the session id, a bearer secret
	URL       string        // /v1/sessions/{session}, relative to the server
	TTL       time.Duration // remaining time by the Redis clock
	ExpiresAt time.Time     // informational
	Owner     string
	Locks     int           // the number of holds in the session
	Holds     []SessionHold // the holds; only from GetSession
}

// SessionHold is one hold of a session.
type SessionHold struct {
	Name   string // the lock's name
	URL    string // the hold's lease URL, relative to the server
	Lease  string // the lease id, the last segment of URL
	Fence  int64
	Count  int
	Shared bool
}

type sessionJSON struct {
	Session   string    `json:"session"`
	URL       string    `json:"url"`
	TTLms     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
	Owner     string    `json:"owner"`
	Locks     int       `json:"locks"`
	Holds     []struct {
		Name   string `json:"name"`
		URL    string `json:"url"`
		Fence  int64  `json:"fence"`
		Count  int    `json:"count"`
		Shared bool   `json:"shared"`
	} `json:"holds"`
}

func decodeSession(body []byte) (*SessionInfo, error) {
	var v sessionJSON
	if err := unmarshal(body, &v); err != nil {
		return nil, err
	}
	s := &SessionInfo{ID: v.Session, URL: v.URL, TTL: ms(v.TTLms), ExpiresAt: v.ExpiresAt, Owner: v.Owner, Locks: v.Locks}
	for _, h := range v.Holds {
		lease := h.URL
		if i := strings.LastIndexByte(lease, '/'); i >= 0 {
			lease = lease[i+1:]
		}
		if u, err := url.PathUnescape(lease); err == nil {
			lease = u
		}
		s.Holds = append(s.Holds, SessionHold{Name: h.Name, URL: h.URL, Lease: lease, Fence: h.Fence,
			Count: h.Count, Shared: h.Shared})
	}
	return s, nil
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// CreateSession makes a session that nothing renews (NewSession makes one and
// renews it). Holds taken with its id (AcquireOptions.Session) last as long as
// it does. With o.IdempotencyKey, a lost answer is retried as Acquire's is, so
// it never leaves a second session behind. Errors: a *Problem
// matching ErrInvalid, ErrUnauthorized, ErrForbidden, ErrRateLimited,
// ErrIdempotencyKeyUsed, ErrIdempotencyKeyMismatch or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error.
func (c *Client) CreateSession(ctx context.Context, o SessionOptions) (*SessionInfo, error) {
	body, err := json.Marshal(struct {
		TTLms int64  `json:"ttl_ms,omitempty"`
		Owner string `json:"owner,omitempty"`
	}{millis(o.TTL), o.Owner})
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	var s *SessionInfo
	err = c.do(ctx, request{method: http.MethodPost, target: "/v1/sessions", body: body,
		idemKey: o.IdempotencyKey, retry: o.IdempotencyKey != "",
		decode: func(status int, _ http.Header, b []byte) (err error) {
			if status != http.StatusCreated {
				return unexpected(status)
			}
			s, err = decodeSession(b)
			return err
		}})
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	return s, nil
}

// GetSession returns the session with its holds. Errors: a *Problem matching
// ErrSessionNotFound, ErrUnauthorized, ErrForbidden or ErrUnavailable;
// ErrUnexpectedResponse; or a transport error.
func (c *Client) GetSession(ctx context.Context, id string) (*SessionInfo, error) {
	s, err := c.session(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	return s, nil
}

// RenewSession renews the session and every hold in it to ttl; 0 means the
// session's last ttl. Errors: as GetSession's, and ErrInvalid (ttl out of the
// server's bounds).
func (c *Client) RenewSession(ctx context.Context, id string, ttl time.Duration) (*SessionInfo, error) {
	var body []byte
	if ttl != 0 {
		body = strconv.AppendInt([]byte(`{"ttl_ms":`), millis(ttl), 10)
		body = append(body, '}')
	}
	s, err := c.session(ctx, http.MethodPatch, id, body)
	if err != nil {
		return nil, fmt.Errorf("renew session: %w", err)
	}
	return s, nil
}

func (c *Client) session(ctx context.Context, method, id string, body []byte) (*SessionInfo, error) {
	var s *SessionInfo
	err := c.send(ctx, method, sessionPath(id), body, func(status int, b []byte) (err error) {
		if status != http.StatusOK {
			return unexpected(status)
		}
		s, err = decodeSession(b)
		return err
	})
	return s, err
}

// EndSession ends the session: every hold in it is released completely and its
// tickets are cancelled. It returns the number of holds released. Errors: as
// GetSession's.
func (c *Client) EndSession(ctx context.Context, id string) (int, error) {
	var v struct {
		Released int `json:"released"`
	}
	err := c.send(ctx, http.MethodDelete, sessionPath(id), nil, func(status int, b []byte) error {
		if status != http.StatusOK {
			return unexpected(status)
		}
		return unmarshal(b, &v)
	})
	if err != nil {
		return 0, fmt.Errorf("end session: %w", err)
	}
	return v.Released, nil
}
