package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/batonhq/baton/store"
)

type health struct {
	Status string `json:"status"`
}

// livez is 200 while the process runs.
func (s *server) livez() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, health{Status: "ok"})
	})
}

// readyz is 200 when Redis answers and the scripts are loaded; 503 otherwise and,
// at once, while shutting down. It is open to everyone, so the answer is
// cached for readyFor: a flood of probes costs Redis at most one check (three
// commands) a second.
func (s *server) readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.draining:
			s.fail(w, r, fmt.Errorf("readyz: shutting down: %w", store.ErrUnavailable))
			return
		default:
		}
		if err := s.ready.check(s.store.Ready); err != nil {
			s.fail(w, r, fmt.Errorf("readyz: %w: %w", store.ErrUnavailable, err))
			return
		}
		writeJSON(w, http.StatusOK, health{Status: "ready"})
	})
}

// readyFor is how long a readiness answer is reused; readyTimeout bounds one
// check.
const (
	readyFor     = time.Second
	readyTimeout = 2 * time.Second
)

// readiness is the last answer of the store's Ready, reused for readyFor; one
// check runs at a time, and requests that come meanwhile share its answer.
type readiness struct {
	mu      sync.Mutex
	until   time.Time
	err     error
	running chan struct{} // closed when the check in progress ends; nil: none
}

// check returns the cached answer, or asks ready (on a context of its own, so
// that a client hanging up cannot cancel the answer others share).
func (c *readiness) check(ready func(context.Context) error) error {
	c.mu.Lock()
	if time.Now().Before(c.until) {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if running := c.running; running != nil {
		c.mu.Unlock()
		<-running
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	}
	running := make(chan struct{})
	c.running = running
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	err := ready(ctx)
	cancel()

	c.mu.Lock()
	c.err, c.until, c.running = err, time.Now().Add(readyFor), nil
	c.mu.Unlock()
	close(running)
	return err
}

// openapi serves the contract this server implements.
func (s *server) openapi() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(s.spec))) // so that a HEAD tells the size too
		_, _ = w.Write(s.spec)
	})
}
