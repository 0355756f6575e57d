package handlers

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// requestID echoes a sane X-Request-Id or makes one, sets Cache-Control: no-store
// on every response, and puts a logger carrying the id in the request context.
func (s *server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneRequestID(id) {
			var b [8]byte
			for i := range b {
				b[i] = byte(rand.Uint32())
			}
			id = hex.EncodeToString(b[:])
		}
		h := w.Header()
		h.Set("X-Request-Id", id)
		h.Set("Cache-Control", "no-store")
		log := s.log.With().Str("request_id", id).Logger()
		next.ServeHTTP(w, r.WithContext(log.WithContext(r.Context())))
	})
}

func saneRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// observe logs and counts each request by its route pattern, never its raw path:
// paths carry lease and ticket ids, which are bearer secrets.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		status := strconv.Itoa(ww.Status())
		elapsed := time.Since(start)
		s.m.Requests.WithLabelValues(route, r.Method, status).Inc()
		s.m.Duration.WithLabelValues(route, r.Method, status).Observe(elapsed.Seconds())
		s.log.Info().
			Str("request_id", w.Header().Get("X-Request-Id")).
			Str("method", r.Method).Str("route", route).Int("status", ww.Status()).
			Int("bytes", ww.BytesWritten()).Dur("duration", elapsed).Msg("request")
	})
}

// recoverer turns a panic into a 500 problem and logs it with its stack.
func (s *server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.fail(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
