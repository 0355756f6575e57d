package batontest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/batontest"
)

// The harness serves a real Baton whose keys work, and its proxy injects each
// fault it offers.
func TestHarness(t *testing.T) {
	s := batontest.Start(t, batontest.Options{Keys: true})
	post := func(base, key string) *http.Response {
		t.Helper()
		rq, _ := http.NewRequest(http.MethodPost, base+"/v1/locks/client:h", strings.NewReader(`{"ttl_ms":1000}`))
		rq.Header.Set("Content-Type", "application/json")
		if key != "" {
			rq.Header.Set("Authorization", "Bearer "+key)
		}
		r, err := http.DefaultClient.Do(rq)
		if err != nil {
			return nil
		}
		r.Body.Close()
		return r
	}
	if r := post(s.URL, ""); r == nil || r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %v", r)
	}
	if r := post(s.URL, s.Keys.Limited); r == nil || r.StatusCode != http.StatusCreated {
		t.Fatalf("limited key: %v", r)
	}
	s.Proxy.Status(503, 1, "/v1/locks")
	if r := post(s.Proxy.URL, s.Keys.Full); r == nil || r.StatusCode != 503 || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("injected 503: %v", r)
	}
	s.Proxy.Cut(1, "/v1/locks")
	if r := post(s.Proxy.URL, s.Keys.Full); r != nil {
		t.Fatalf("cut: got an answer %d", r.StatusCode)
	}
	s.Proxy.Timeout(200*time.Millisecond, "/v1/locks")
	rq, _ := http.NewRequest(http.MethodGet, s.Proxy.URL+"/v1/locks/client:h?wait_ms=2000", nil)
	rq.Header.Set("Authorization", "Bearer "+s.Keys.Full)
	if r, err := http.DefaultClient.Do(rq); err != nil || r.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("timeout: %v %v", r, err)
	}
	s.Proxy.Reset()
	if n := s.Proxy.Count("/v1/locks"); n < 3 {
		t.Errorf("count %d", n)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
}
