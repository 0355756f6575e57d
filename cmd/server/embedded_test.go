package main

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The zero-setup mode of `make run`: no BATON_REDIS_URL starts the embedded store.
// Acquire, a waiter, expiry and release work there as on Redis.
func TestEmbeddedStore(t *testing.T) {
	base, logs := startServe(t, testConfig())
	if !strings.Contains(logs.String(), "embedded in-process store") {
		t.Fatalf("no warning about the embedded store in the log:\n%s", logs)
	}
	if st, _, _ := call(t, "GET", base+"/readyz", ""); st != http.StatusOK {
		t.Fatalf("readyz %d", st)
	}

	st, _, lease := call(t, "POST", base+"/v1/locks/try", `{"ttl_ms": 300, "owner": "first"}`)
	if st != http.StatusCreated {
		t.Fatalf("acquire: %d %v", st, lease)
	}
	if st, _, _ := call(t, "POST", base+"/v1/locks/try", `{}`); st != http.StatusLocked {
		t.Fatalf("second acquire: %d, want 423", st)
	}

	// The holder never releases: a waiter gets the lock when the lease runs out.
	st, _, next := call(t, "POST", base+"/v1/locks/try", `{"ttl_ms": 5000, "wait_ms": 5000}`)
	if st != http.StatusCreated {
		t.Fatalf("waiter after expiry: %d %v", st, next)
	}
	if next["fence"].(float64) <= lease["fence"].(float64) {
		t.Fatalf("fence %v after %v", next["fence"], lease["fence"])
	}
	expired, _ := time.Parse(time.RFC3339Nano, lease["expires_at"].(string))
	acquired, _ := time.Parse(time.RFC3339Nano, next["acquired_at"].(string))
	t.Logf("expiry to next grant: %v", acquired.Sub(expired))

	// A waiter woken by a release.
	done := make(chan int, 1)
	go func() {
		st, _, _ := call(t, "POST", base+"/v1/locks/try", `{"wait_ms": 5000}`)
		done <- st
	}()
	url := base + next["url"].(string)
	if st, _, body := call(t, "DELETE", url, ""); st != http.StatusOK || body["released"] != true {
		t.Fatalf("release: %d %v", st, body)
	}
	if st := <-done; st != http.StatusCreated {
		t.Fatalf("waiter after release: %d", st)
	}
}
