package handlers_test

import (
	"net/http"
	"testing"
)

func TestAcquireRenewRelease(t *testing.T) { onBoth(t, testAcquireRenewRelease) }

func testAcquireRenewRelease(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	l := e.acquire("basic", map[string]any{"ttl_ms": 5000, "owner": "worker-1"})
	if l.Header.Get("Location") != l.Str("url") {
		t.Fatalf("Location %q, url %q", l.Header.Get("Location"), l.Str("url"))
	}
	url := l.Str("url")
	r := e.do(req{Method: "GET", Path: url})
	wantStatus(t, r, http.StatusOK, "")
	r = e.do(req{Method: "PATCH", Path: url, Body: map[string]any{"ttl_ms": 9000}})
	wantStatus(t, r, http.StatusOK, "")
	if r.Int("ttl_ms") < 8000 || r.Int("fence") != l.Int("fence") {
		t.Fatalf("renewed %s", r.Raw)
	}
	r = e.do(req{Method: "DELETE", Path: url})
	wantStatus(t, r, http.StatusOK, "")
	if !r.Bool("released") || r.Int("count") != 0 {
		t.Fatalf("release %s", r.Raw)
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: url}), http.StatusNotFound, "lease-not-held")
}
