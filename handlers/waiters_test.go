package handlers_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A key that sets no max_waiters gets the server's default (below the
// process's limit), so that it cannot take every long-poll from the other
// keys: its next watch is a 429 that names the limit and where it is set,
// while another key still waits. A key's own max_waiters is named as such, and
// the process's limit as BATON_MAX_WAITERS.
func TestKeyWithoutMaxWaitersCannotTakeEveryWaiter(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file(), MaxWaiters: 8, KeyMaxWaiters: 2})
	held := e.do(req{Method: "POST", Path: "/v1/locks/billing:w", Body: map[string]any{"ttl_ms": 60000}, Header: bearer(k.billing)})
	wantStatus(t, held, http.StatusCreated, "")
	watch := "/v1/locks/billing:w?wait_ms=5000&fence=" + strconv.FormatInt(held.Int("fence"), 10)
	var waiting []<-chan answer
	for range 2 {
		waiting = append(waiting, e.send(req{Method: "GET", Path: watch, Header: bearer(k.reader)}))
	}
	e.awaitWaiters(2)
	r := e.do(req{Method: "GET", Path: watch, Header: bearer(k.reader)})
	wantStatus(t, r, http.StatusTooManyRequests, "too-many-waiters")
	if d := r.Str("detail"); !strings.Contains(d, `"dashboard"`) || !strings.Contains(d, "2 waiting requests") || !strings.Contains(d, "BATON_KEY_MAX_WAITERS") {
		t.Errorf("detail %q: want it to name the key, its limit and BATON_KEY_MAX_WAITERS", d)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// Another key still waits.
	waiting = append(waiting, e.send(req{Method: "GET", Path: watch, Header: bearer(k.billing)}))
	e.awaitWaiters(3)

	// A key's own max_waiters (narrow: 1) is named as the keys file's.
	narrow := e.do(req{Method: "POST", Path: "/v1/locks/narrow:w", Body: map[string]any{"ttl_ms": 60000}, Header: bearer(k.narrow)})
	wantStatus(t, narrow, http.StatusCreated, "")
	waiting = append(waiting, e.send(req{Method: "GET", Path: "/v1/locks/narrow:w?wait_ms=5000&fence=" + strconv.FormatInt(narrow.Int("fence"), 10), Header: bearer(k.narrow)}))
	e.awaitWaiters(4)
	r = e.do(req{Method: "POST", Path: "/v1/locks/narrow:w", Body: map[string]any{"wait_ms": 1000}, Header: bearer(k.narrow)})
	wantStatus(t, r, http.StatusTooManyRequests, "too-many-waiters")
	if d := r.Str("detail"); !strings.Contains(d, "1 waiting requests") || !strings.Contains(d, "max_waiters in the keys file") {
		t.Errorf("detail %q: want it to name the key's own max_waiters", d)
	}

	wantStatus(t, e.do(req{Method: "DELETE", Path: held.Str("url"), Header: bearer(k.billing)}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: narrow.Str("url"), Header: bearer(k.narrow)}), http.StatusOK, "")
	for _, w := range waiting {
		wantStatus(t, awaitAnswer(t, w, 5*time.Second).r, http.StatusOK, "")
	}
}

// The process's own limit on long-polls names itself.
func TestProcessWaiterLimitNamesItself(t *testing.T) {
	e := newEnv(t, envOptions{MaxWaiters: 1})
	held := e.acquire("pw", map[string]any{"ttl_ms": 60000})
	w := e.send(req{Method: "GET", Path: "/v1/locks/pw?wait_ms=5000&fence=" + strconv.FormatInt(held.Int("fence"), 10)})
	e.awaitWaiters(1)
	r := e.do(req{Method: "POST", Path: "/v1/locks/pw", Body: map[string]any{"wait_ms": 1000}})
	wantStatus(t, r, http.StatusTooManyRequests, "too-many-waiters")
	if d := r.Str("detail"); !strings.Contains(d, "BATON_MAX_WAITERS") {
		t.Errorf("detail %q: want it to name BATON_MAX_WAITERS", d)
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: held.Str("url")}), http.StatusOK, "")
	wantStatus(t, awaitAnswer(t, w, 5*time.Second).r, http.StatusOK, "")
}
