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

// send performs one request to c.base+target (target already escaped) and reads
// the whole response. For a status of 400 or more it returns a *Problem;
// otherwise it hands the status and body to decode, if decode is not nil, and
// returns its error. The body bytes are valid only during decode. Transport
// failures are returned as net/http reports them; once ctx is done, the error
// always matches ctx.Err() through errors.Is.
func (c *Client) send(ctx context.Context, method, target string, body []byte, decode func(status int, body []byte) error) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+target, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// Some net/http paths report a cancelled request without wrapping ctx's error.
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			return fmt.Errorf("%w: %w", cerr, err)
		}
		return err
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
		return fmt.Errorf("read response: %w", rerr)
	}
	if resp.StatusCode >= 400 {
		return newProblem(resp, buf.Bytes())
	}
	if decode == nil {
		return nil
	}
	return decode(resp.StatusCode, buf.Bytes())
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
