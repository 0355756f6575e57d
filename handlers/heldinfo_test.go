package handlers_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/batonhq/baton/auth"
)

// A refused acquire (423) tells the holder's owner label, time left and queue
// only to a key that may read the lock: a lock-only key, which gets 403 for
// the lock's state, learns nothing more from a 423 (and Retry-After is 1, not
// the holder's time left). A key with read, and protected mode, see them.
func TestLockHeldShowsHolderOnlyToReaders(t *testing.T) {
	holder, locker, reader := auth.NewKey(), auth.NewKey(), auth.NewKey()
	e := newEnv(t, envOptions{Keys: fmt.Sprintf(`keys:
  - name: holder
    sha256: %s
    allow:
      - names: "*"
        actions: [lock]
  - name: locker
    sha256: %s
    allow:
      - names: "*"
        actions: [lock]
  - name: lock-reader
    sha256: %s
    allow:
      - names: "*"
        actions: [lock, read]
`, auth.KeySHA256(holder), auth.KeySHA256(locker), auth.KeySHA256(reader))})
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/h", Body: map[string]any{"ttl_ms": 600000, "owner": "payroll-run-7"}, Header: bearer(holder)}), http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/h", Body: map[string]any{"fair": true}, Header: bearer(holder)}), http.StatusAccepted, "")

	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/h", Header: bearer(locker)}), http.StatusForbidden, "forbidden")
	for _, body := range []map[string]any{{}, {"wait_ms": 50}} {
		r := e.do(req{Method: "POST", Path: "/v1/locks/h", Body: body, Header: bearer(locker)})
		wantStatus(t, r, http.StatusLocked, "lock-held")
		for _, field := range []string{"owner", "ttl_ms", "waiters"} {
			if _, ok := r.Body[field]; ok {
				t.Errorf("423 to a lock-only key shows %s: %s", field, r.Raw)
			}
		}
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("423 to a lock-only key: Retry-After %q, want 1 (not the holder's time left)", r.Header.Get("Retry-After"))
		}
	}

	r := e.do(req{Method: "POST", Path: "/v1/locks/h", Body: map[string]any{}, Header: bearer(reader)})
	wantStatus(t, r, http.StatusLocked, "lock-held")
	if r.Str("owner") != "payroll-run-7" || r.Int("ttl_ms") <= 0 || r.Int("waiters") != 1 || r.Header.Get("Retry-After") == "1" {
		t.Errorf("423 to a key that may read: %s, Retry-After %q; want the holder, its time left and the queue", r.Raw, r.Header.Get("Retry-After"))
	}

	p := newEnv(t, envOptions{Protected: true})
	p.acquire("h", map[string]any{"ttl_ms": 600000, "owner": "cron"})
	if r := p.do(req{Method: "POST", Path: "/v1/locks/h", Body: map[string]any{}}); r.Str("owner") != "cron" {
		t.Errorf("423 in protected mode: %s, want the holder", r.Raw)
	}
}
