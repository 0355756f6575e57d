package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/batonhq/baton/client"
)

func TestProblemIs(t *testing.T) {
	sentinels := []error{client.ErrLockHeld, client.ErrLeaseNotHeld, client.ErrTicketGone,
		client.ErrTooManyWaiters, client.ErrUnavailable, client.ErrInvalid, client.ErrRateLimited,
		client.ErrUnauthorized, client.ErrForbidden, client.ErrSessionNotFound, client.ErrLimitMismatch,
		client.ErrIdempotencyKeyUsed, client.ErrIdempotencyKeyMismatch, client.ErrOverloaded}
	tests := []struct {
		name string
		give client.Problem
		want error // nil: matches none
	}{
		{"lock-held", client.Problem{Type: "/problems/lock-held", Status: 423}, client.ErrLockHeld},
		{"lease-not-held", client.Problem{Type: "/problems/lease-not-held", Status: 404}, client.ErrLeaseNotHeld},
		{"ticket-gone", client.Problem{Type: "/problems/ticket-gone", Status: 410}, client.ErrTicketGone},
		{"too-many-waiters", client.Problem{Type: "/problems/too-many-waiters", Status: 429}, client.ErrTooManyWaiters},
		{"store-unavailable", client.Problem{Type: "/problems/store-unavailable", Status: 503}, client.ErrUnavailable},
		{"overloaded", client.Problem{Type: "/problems/overloaded", Status: 503}, client.ErrOverloaded},
		{"invalid-request", client.Problem{Type: "/problems/invalid-request", Status: 400}, client.ErrInvalid},
		{"invalid-name", client.Problem{Type: "/problems/invalid-name", Status: 400}, client.ErrInvalid},
		{"rate-limited", client.Problem{Type: "/problems/rate-limited", Status: 429}, client.ErrRateLimited},
		{"unauthorized", client.Problem{Type: "/problems/unauthorized", Status: 401}, client.ErrUnauthorized},
		{"forbidden", client.Problem{Type: "/problems/forbidden", Status: 403}, client.ErrForbidden},
		{"session-not-found", client.Problem{Type: "/problems/session-not-found", Status: 404}, client.ErrSessionNotFound},
		{"limit-mismatch", client.Problem{Type: "/problems/limit-mismatch", Status: 409}, client.ErrLimitMismatch},
		{"idempotency-key-used", client.Problem{Type: "/problems/idempotency-key-used", Status: 409}, client.ErrIdempotencyKeyUsed},
		{"idempotency-key-mismatch", client.Problem{Type: "/problems/idempotency-key-mismatch", Status: 422}, client.ErrIdempotencyKeyMismatch},
		{"bare 401", client.Problem{Status: 401}, client.ErrUnauthorized},
		{"bare 403", client.Problem{Status: 403}, client.ErrForbidden},
		{"bare 409: no kind", client.Problem{Status: 409}, nil},
		{"absolute type", client.Problem{Type: "https://baton.example/problems/lock-held", Status: 423}, client.ErrLockHeld},
		{"the type decides", client.Problem{Type: "/problems/not-found", Status: 404}, nil},
		{"body-too-large", client.Problem{Type: "/problems/body-too-large", Status: 413}, nil},
		{"internal", client.Problem{Type: "/problems/internal", Status: 500}, nil},
		{"no type: status", client.Problem{Status: 503}, client.ErrUnavailable},
		{"about:blank: status", client.Problem{Type: "about:blank", Status: 429}, client.ErrTooManyWaiters},
		{"no type, other status", client.Problem{Status: 502}, nil},
	}
	// Every 503 of Baton's is ErrUnavailable: nothing was done, try again.
	also := map[string]error{"overloaded": client.ErrUnavailable}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = &tt.give
			for _, s := range sentinels {
				want := s == tt.want || s == also[tt.name]
				if got := errors.Is(err, s); got != want {
					t.Errorf("errors.Is(%v) = %v, want %v", s, got, want)
				}
			}
		})
	}
}

// TestBareProblem covers an error answered by something in front of Baton: no
// problem body, so the status decides, and an HTTP-date Retry-After.
func TestBareProblem(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter string
		want       time.Duration // at least want-2s (the date has whole seconds), at most want
	}{
		{"seconds", "3", 3 * time.Second},
		{"date", time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat), 5 * time.Second},
		{"none", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				http.Error(w, "<html>bad gateway</html>", http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			err := client.New(srv.URL).Ready(context.Background())
			p := wantProblem(t, err, client.ErrUnavailable, http.StatusServiceUnavailable)
			if p.Type != "" || p.Title != "Service Unavailable" || p.RetryAfter > tt.want || p.RetryAfter < tt.want-2*time.Second {
				t.Fatalf("problem %+v", *p)
			}
		})
	}
}

func TestUnexpectedResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name": 7}`))
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, client.WithHTTPClient(srv.Client()), client.WithUserAgent("test"))
	if _, err := c.Acquire(context.Background(), "x", client.AcquireOptions{}); !errors.Is(err, client.ErrUnexpectedResponse) {
		t.Fatalf("acquire: got %v, want ErrUnexpectedResponse", err)
	}
	if _, err := c.State(context.Background(), "x"); !errors.Is(err, client.ErrUnexpectedResponse) {
		t.Fatalf("state: got %v, want ErrUnexpectedResponse", err)
	}
}
