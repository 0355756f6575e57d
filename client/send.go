package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

const (
	// maxResponse bounds how much of a response body is read; Baton's bodies are
	// a few hundred bytes.
	maxResponse = 1 << 20
	// maxDrain bounds how much of an oversized body is discarded to keep the
	// connection reusable; beyond it, closing the connection is cheaper.
	maxDrain = 64 << 10
	// maxPooled keeps unusually large buffers out of the pool.
	maxPooled = 64 << 10
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// request is one call to the API.
type request struct {
	method, target string // target is already escaped
	body           []byte // nil: none
	idemKey        string // sent as Idempotency-Key when not empty
	// retry: a lost answer (transport error, 502, 503, 504) is retried with the
	// same key and body, for at most the Client's retry time.
	retry bool
	// decode, if not nil, reads a success answer; the body bytes are valid
	// only during the call.
	decode func(status int, h http.Header, body []byte) error
}

// send performs one request to c.base+target, once. For a status of 400 or
// more it returns a *Problem; otherwise it hands the status and body to decode,
// if decode is not nil, and returns its error.
func (c *Client) send(ctx context.Context, method, target string, body []byte, decode func(status int, body []byte) error) error {
	r := request{method: method, target: target, body: body}
	if decode != nil {
		r.decode = func(status int, _ http.Header, b []byte) error { return decode(status, b) }
	}
	return c.do(ctx, r)
}

// do performs r, retrying a lost answer when r.retry is set. Transport failures
// are returned as net/http reports them (after the last attempt); once ctx is
// done, the error always matches ctx.Err() through errors.Is.
func (c *Client) do(ctx context.Context, r request) error {
	if !r.retry {
		return c.once(ctx, r)
	}
	return c.retry(ctx, func(bool) error { return c.once(ctx, r) })
}

// retry calls attempt until it succeeds, fails for another reason than a lost
// answer (see lostAnswer), or the retry time or ctx runs out; it returns the
// last error. attempt learns whether an earlier attempt's answer was lost, so
// that it can read a "not there" as "done by the earlier attempt".
func (c *Client) retry(ctx context.Context, attempt func(again bool) error) error {
	start := time.Now()
	var b backoff
	err := attempt(false)
	attempts := 1
	for err != nil && lostAnswer(err) && ctx.Err() == nil && c.retryMax > 0 {
		d := b.next(retryAfterOf(err))
		if time.Since(start)+d > c.retryMax {
			break
		}
		if !sleepCtx(ctx, d) {
			return fmt.Errorf("%w: after %d attempts: %w", ctx.Err(), attempts, err)
		}
		attempts++
		err = attempt(true)
	}
	if err != nil && attempts > 1 {
		return fmt.Errorf("after %d attempts: %w", attempts, err)
	}
	return err
}

// once performs r once.
func (c *Client) once(ctx context.Context, r request) error {
	var rd io.Reader
	if r.body != nil {
		rd = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.target, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if r.idemKey != "" {
		req.Header.Set("Idempotency-Key", r.idemKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// Some net/http paths report a cancelled request without wrapping ctx's error.
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return fmt.Errorf("%w: %w", cerr, err)
		}
		return &transportError{err: err}
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooled {
			bufPool.Put(buf)
		}
	}()
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, maxResponse))
	// Drain what is left so the connection goes back to the pool.
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
	if rerr != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%w: read response: %w", cerr, rerr)
		}
		return &transportError{err: fmt.Errorf("read response: %w", rerr)}
	}
	if resp.StatusCode >= 400 {
		return newProblem(resp, buf.Bytes())
	}
	if r.decode == nil {
		return nil
	}
	return r.decode(resp.StatusCode, resp.Header, buf.Bytes())
}

// transportError is a request that got no answer: the connection failed or
// broke before a whole response arrived. It reads as the error it wraps.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// lostAnswer reports whether err says nothing of what the server did: no
// answer, or a 502, 503 or 504, which a gateway in front of Baton (or Baton
// while Redis is away) gives without knowing whether the request took effect.
func lostAnswer(err error) bool {
	var p *Problem
	if errors.As(err, &p) {
		return p.Status == http.StatusBadGateway || p.Status == http.StatusServiceUnavailable ||
			p.Status == http.StatusGatewayTimeout
	}
	var te *transportError
	return errors.As(err, &te)
}

// lockPath is /v1/locks/{name}, escaped.
func lockPath(name string) string { return "/v1/locks/" + url.PathEscape(name) }

// subPath is /v1/locks/{name}/{kind}/{id}, escaped.
func subPath(name, kind, id string) string {
	return "/v1/locks/" + url.PathEscape(name) + "/" + kind + "/" + url.PathEscape(id)
}

// millis is d in whole milliseconds, rounded away from zero so that a duration
// below a millisecond is never sent as 0, which means "the default" or "no
// wait". A negative d stays negative, and the server rejects it with ErrInvalid.
func millis(d time.Duration) int64 {
	if d < 0 {
		return -millis(-d)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// waitQuery is "?wait_ms=N", or "" for a zero wait.
func waitQuery(wait time.Duration) string {
	if wait == 0 {
		return ""
	}
	return "?wait_ms=" + strconv.FormatInt(millis(wait), 10)
}

// unexpected reports a success status the endpoint does not answer with.
func unexpected(status int) error {
	return fmt.Errorf("%w: status %d", ErrUnexpectedResponse, status)
}
