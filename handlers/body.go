package handlers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// errBodyTimeout: the request body did not arrive within the body read timeout.
var errBodyTimeout = errors.New("request body not received in time")

// bodyReadTimeout is BodyReadTimeout, or its default.
func (l Limits) bodyReadTimeout() time.Duration {
	if l.BodyReadTimeout > 0 {
		return l.BodyReadTimeout
	}
	return DefaultBodyReadTimeout
}

// bodyDeadline bounds the time a request body may take to arrive: the server
// bounds the headers (ReadHeaderTimeout) but nothing else bounds the body, so a
// client that announces 200 bytes and sends one every few seconds would keep the
// connection and its goroutine for as long as it likes. A handler reading such a
// body gets errBodyTimeout (408); a handler that reads no body answers as usual,
// and net/http, which then reads the body's rest before the answer, gives up at
// the same deadline and closes the connection.
//
// The deadline is lifted once the body has been read to its end: it must not
// bound a long-poll that follows, whose client-gone detection (net/http's read
// of the idle connection) would fail at it and cancel the wait. net/http lifts
// it too when it starts that read; deadlineBody does not rely on it.
func (s *server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(s.limits.bodyReadTimeout())); err != nil {
			next.ServeHTTP(w, r) // not a connection of net/http's (a test recorder): nothing to bound
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = b
		next.ServeHTTP(w, r)
		if b.timedOut {
			s.m.BodyReadTimeouts.Inc()
		}
	})
}

// deadlineBody is a request body read under a deadline, which it lifts at the
// body's end and turns into errBodyTimeout when it passes.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timedOut bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut = true
		err = fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	return n, err
}
