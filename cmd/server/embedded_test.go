package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/internal/embedded"
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

// The embedded store's port is open to every local user: it needs a password,
// a new random one each start, which only this process knows.
func TestEmbeddedStoreNeedsPassword(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	emb, err := embedded.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	anyone := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { anyone.Close() })
	if err := anyone.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("SET without a password: got %v, want NOAUTH", err)
	}
	opt, err := redis.ParseURL(emb.URL())
	if err != nil {
		t.Fatal(err)
	}
	owner := redis.NewClient(opt)
	t.Cleanup(func() { owner.Close() })
	if err := owner.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with the URL's password: %v", err)
	}
	other, err := embedded.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	otherOpt, err := redis.ParseURL(other.URL())
	if err != nil {
		t.Fatal(err)
	}
	if otherOpt.Password == opt.Password || len(opt.Password) < 40 {
		t.Errorf("passwords %q and %q: want a new random one each start", opt.Password, otherOpt.Password)
	}

	// The server's own store: its address is logged, its password is not.
	_, logs := startServe(t, testConfig())
	var line struct{ Addr string }
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "embedded in-process store") {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line.Addr == "" {
		t.Fatalf("no address in the embedded store's log line:\n%s", logs)
	}
	anyone = redis.NewClient(&redis.Options{Addr: line.Addr})
	t.Cleanup(func() { anyone.Close() })
	if err := anyone.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("GET on the server's store without a password: got %v, want NOAUTH", err)
	}
	if strings.Contains(logs.String(), "redis://") {
		t.Errorf("the log shows the store's URL:\n%s", logs)
	}
}
