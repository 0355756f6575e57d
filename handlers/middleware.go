package handlers

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// requestID echoes a sane X-Request-Id or makes one, sets Cache-Control: no-store
// and X-Content-Type-Options: nosniff (no browser reads a JSON answer as a page
// or a script) on every response, and puts a logger carrying the id in the
// request context.
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
		h.Set("X-Content-Type-Options", "nosniff")
		log := s.log.With().Str("request_id", id).Logger()
		ctx := context.WithValue(log.WithContext(r.Context()), requestIDKey{}, id)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type requestIDKey struct{}

// requestIDOf is the request's id, as requestID set it.
func requestIDOf(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
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
// paths carry lease and ticket ids, which are bearer secrets. Every label value
// comes from a fixed set (methodLabel, the route patterns of routes.go or
// "unmatched", the statuses the handlers write), so that no request adds a
// series to /metrics; the request id is logged, never a label.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		r, info := withInfo(r, start)
		next.ServeHTTP(ww, r)
		if info.parked {
			return // its answer is still to come: serveWait records it then
		}
		code := ww.Status()
		if code == 0 {
			code = http.StatusOK // nothing written: net/http answers 200
		}
		s.record(w.Header().Get("X-Request-Id"), traceIDOf(r.Context()), r.Method, routeOf(r), info.principal, code, ww.BytesWritten(), start)
	})
}

// routeOf is the request's route pattern, or "unmatched". chi recycles the
// route context once the router returns: take it before.
func routeOf(r *http.Request) string {
	if route := chi.RouteContext(r.Context()).RoutePattern(); route != "" {
		return route
	}
	return "unmatched"
}

// record logs and counts an answered request.
func (s *server) record(id, traceID, method, route, principal string, code, bytes int, start time.Time) {
	m, status := methodLabel(method), strconv.Itoa(code)
	elapsed := time.Since(start)
	s.m.Requests.WithLabelValues(route, m, status, principal).Inc()
	s.m.Duration.WithLabelValues(route, m, status).Observe(elapsed.Seconds())
	if code == http.StatusUnauthorized {
		return // its audit line, or the summary of a burst of them, is its log (audit.go)
	}
	ev := s.log.Info()
	if traceID != "" {
		ev = ev.Str("trace_id", traceID)
	}
	ev.Str("request_id", id).
		Str("method", logMethod(method)).Str("route", route).Int("status", code).Str("principal", principal).
		Int("bytes", bytes).Dur("duration", elapsed).Msg("request")
}

// traceIDOf is the id of the trace ctx's span is part of, "" when none.
func traceIDOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// methodLabel is the method as a metric label: one of the methods HTTP clients
// use, or "other". Go's server accepts any token as a method, so labelling the
// method as sent would let each client add series (and 50 KB method names).
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodPut:
		return m
	}
	return "other"
}

// maxLogMethod is the most bytes of a method the access log shows.
const maxLogMethod = 32

// logMethod is the method as the access log shows it: as sent, but at most
// maxLogMethod bytes (then "...") and nothing but visible ASCII, so that no
// request makes a log line of 50 KB or puts a control character in it.
func logMethod(m string) string {
	if methodLabel(m) != "other" {
		return m
	}
	b := []byte(m[:min(len(m), maxLogMethod)])
	for i, c := range b {
		if c < 0x21 || c > 0x7e {
			b[i] = '?'
		}
	}
	if len(m) > maxLogMethod {
		b = append(b, "..."...)
	}
	return string(b)
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

// tracerName is the instrumentation scope of the request spans.
const tracerName = "github.com/batonhq/baton/handlers"

// traced gives each request a server span, the child of the span whose W3C
// traceparent the request carries (through prop; nil: trace context only). The
// span is named "METHOD route-pattern", as OpenTelemetry's HTTP conventions say,
// and carries only the method, the route pattern, the status and the protocol:
// never the path or the query, which carry lease, ticket and session ids
// (bearer secrets), nor a header. That is why this is not otelhttp, which
// records the raw path. A request no route matches is named by its method alone.
func traced(tp trace.TracerProvider, prop propagation.TextMapPropagator) func(http.Handler) http.Handler {
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	tracer := tp.Tracer(tracerName)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method := methodLabel(r.Method)
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			scheme := "http"
			if r.TLS != nil {
				scheme = "https"
			}
			ctx, span := tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
				semconv.HTTPRequestMethodKey.String(method),
				semconv.URLScheme(scheme),
				semconv.NetworkProtocolVersion(fmt.Sprintf("%d.%d", r.ProtoMajor, r.ProtoMinor)),
			))
			defer span.End()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(ctx))
			if route := chi.RouteContext(r.Context()).RoutePattern(); route != "" {
				span.SetName(method + " " + route)
				span.SetAttributes(semconv.HTTPRoute(route))
			}
			code := ww.Status()
			if code == 0 {
				code = http.StatusOK
			}
			span.SetAttributes(semconv.HTTPResponseStatusCode(code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
		})
	}
}
