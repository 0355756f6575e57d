package handlers_test

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// HEAD is served wherever GET is (RFC 9110, 9.3.2): the same status and headers
// as the GET would get, and no body. Health checkers and link checkers use it.

// getRoutes are requests whose GET is served, with the status both methods get.
func getRoutes(e *env, lease, ticket string) []struct {
	name, path string
	want       int
} {
	return []struct {
		name, path string
		want       int
	}{
		{"lock state", "/v1/locks/held", http.StatusOK},
		{"free lock state", "/v1/locks/free", http.StatusOK},
		{"lease", lease, http.StatusOK},
		{"lease not held", "/v1/locks/held/leases/" + unknownID(), http.StatusNotFound},
		{"ticket poll", ticket, http.StatusAccepted},
		{"ticket gone", "/v1/locks/held/tickets/" + unknownID(), http.StatusGone},
		{"invalid name", "/v1/locks/a%20b", http.StatusBadRequest},
		{"unknown query parameter", "/v1/locks/held?wait=5", http.StatusBadRequest},
		{"livez", "/livez", http.StatusOK},
		{"readyz", "/readyz", http.StatusOK},
		{"metrics", "/metrics", http.StatusOK},
		{"openapi.yaml", "/openapi.yaml", http.StatusOK},
		{"no such route", "/nowhere", http.StatusNotFound},
	}
}

func TestHead(t *testing.T) {
	e := newEnv(t, envOptions{TicketTTL: time.Minute})
	lease := e.acquire("held", map[string]any{"ttl_ms": 60000, "owner": "holder"}).Str("url")
	tk := e.do(req{Method: http.MethodPost, Path: "/v1/locks/held", Body: map[string]any{"fair": true}})
	wantStatus(t, tk, http.StatusAccepted, "")
	for _, tt := range getRoutes(e, lease, tk.Str("url")) {
		t.Run(tt.name, func(t *testing.T) {
			e := envIn(t, e)
			// Through Go's client, validated against the GET operation of the spec.
			wantStatus(t, e.do(req{Method: http.MethodHead, Path: tt.path}), tt.want, "")

			// A HEAD and a GET pipelined on one connection: had the HEAD answer
			// carried a body, the GET's answer would not parse.
			c := e.dial(10 * time.Second)
			c.write("HEAD " + tt.path + " HTTP/1.1\r\nHost: baton\r\n\r\n" +
				"GET " + tt.path + " HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n")
			head, err := c.read(http.MethodHead)
			if err != nil {
				t.Fatalf("HEAD %s: %v", tt.path, err)
			}
			get, err := c.read(http.MethodGet)
			if err != nil {
				t.Fatalf("GET %s after HEAD: %v (did the HEAD answer carry a body?)", tt.path, err)
			}
			c.closed()
			if head.Status != tt.want || get.Status != tt.want {
				t.Errorf("HEAD %d, GET %d, want %d for both", head.Status, get.Status, tt.want)
			}
			if got, want := headersOf(head.Header), headersOf(get.Header); !slices.Equal(got, want) {
				t.Errorf("HEAD headers %v\nwant the GET's %v", got, want)
			}
			if cl := head.Header.Get("Content-Length"); cl != "" && tt.path != "/metrics" && cl != get.Header.Get("Content-Length") {
				t.Errorf("HEAD Content-Length %s, GET's %q (a body of %d bytes)", cl, get.Header.Get("Content-Length"), len(get.Raw))
			}
		})
	}
}

// headersOf lists a response's header fields but those that differ between two
// answers to the same request (Date, X-Request-Id) or that only frame the body.
func headersOf(h http.Header) []string {
	var out []string
	for k, vs := range h {
		switch k {
		case "Date", "X-Request-Id", "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	slices.Sort(out)
	return out
}

// TestHeadLongPoll: a HEAD with wait_ms waits like the GET, and a HEAD ticket poll
// that is granted loses nothing: the lease is the ticket's, and the next GET poll
// returns it.
func TestHeadLongPoll(t *testing.T) {
	e := newEnv(t, envOptions{TicketTTL: time.Minute})
	holder := e.acquire("watched", map[string]any{"ttl_ms": 60000}).Str("url")

	watch := e.send(req{Method: http.MethodHead, Path: "/v1/locks/watched?wait_ms=10000"})
	e.awaitWaiters(1)
	select {
	case a := <-watch:
		t.Fatalf("HEAD watch answered %v before the release", a.r.Status)
	default:
	}
	wantStatus(t, e.do(req{Method: http.MethodDelete, Path: holder}), http.StatusOK, "")
	wantStatus(t, awaitAnswer(t, watch, 5*time.Second).r, http.StatusOK, "")
	e.awaitWaiters(0)

	holder = e.acquire("queued", map[string]any{"ttl_ms": 60000}).Str("url")
	tk := e.do(req{Method: http.MethodPost, Path: "/v1/locks/queued", Body: map[string]any{"fair": true}})
	wantStatus(t, tk, http.StatusAccepted, "")
	poll := e.send(req{Method: http.MethodHead, Path: tk.Str("url") + "?wait_ms=10000"})
	e.awaitWaiters(1)
	wantStatus(t, e.do(req{Method: http.MethodDelete, Path: holder}), http.StatusOK, "")
	wantStatus(t, awaitAnswer(t, poll, 5*time.Second).r, http.StatusOK, "")
	got := e.do(req{Method: http.MethodGet, Path: tk.Str("url")})
	wantStatus(t, got, http.StatusOK, "")
	wantStatus(t, e.do(req{Method: http.MethodDelete, Path: got.Str("url")}), http.StatusOK, "")
}
