package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
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

// readyz is 200 when Redis answers and the scripts are loaded; 503 otherwise and
// while shutting down.
func (s *server) readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.store.Ready(ctx); err != nil {
			s.fail(w, r, fmt.Errorf("readyz: %w: %w", store.ErrUnavailable, err))
			return
		}
		writeJSON(w, http.StatusOK, health{Status: "ready"})
	})
}

// openapi serves the contract this server implements.
func (s *server) openapi() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(s.spec))) // so that a HEAD tells the size too
		_, _ = w.Write(s.spec)
	})
}
