package handlers_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
)

// Hostile review 2: access control.

// An operator revokes a key's grant on a set of names (reload: the key keeps
// lock on other names). The key is refused every lease route of the revoked
// names (403), but its session still renews its holds there: PATCH
// /v1/sessions/{id} is authorized by "lock on some name" and renews every
// hold of the session, whatever the lock. With a heartbeat, the key keeps the
// revoked locks for as long as it likes; renewing a hold the key may no
// longer renew directly should be refused (or the hold left to run out).
func TestReview2SessionRenewsRevokedLocks(t *testing.T) {
	key := auth.NewKey()
	file := func(names ...string) string {
		s := fmt.Sprintf("keys:\n  - name: worker\n    sha256: %s\n    allow:\n", auth.KeySHA256(key))
		for _, n := range names {
			s += fmt.Sprintf("      - names: %q\n        actions: [lock, read]\n", n)
		}
		return s
	}
	e := newEnv(t, envOptions{Keys: file("billing:*", "other:*")})
	as := bearer(key)
	s := e.newSession(map[string]any{"ttl_ms": 2000}, as)
	l := e.do(req{Method: "POST", Path: "/v1/locks/billing:rv", Body: map[string]any{"session": s.Str("session")}, Header: as})
	wantStatus(t, l, http.StatusCreated, "")

	if err := os.WriteFile(e.KeysFile, []byte(file("other:*")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Guard.Reload(); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.do(req{Method: "PATCH", Path: l.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: as}), http.StatusForbidden, "forbidden")
	r := e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: as})
	t.Logf("session renewal after the revocation: %d", r.Status)
	time.Sleep(2500 * time.Millisecond) // past the hold's deadline before the renewal
	st, err := e.Store.State(t.Context(), "billing:rv")
	if err != nil {
		t.Fatal(err)
	}
	if st.Held {
		t.Errorf("after its grant on billing:* was revoked, the key renewed its hold on billing:rv through its session: held, %v left",
			st.TTL.Round(time.Second))
	}
}
