package deploy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/batontest"
)

// HAProxy (haproxy.cfg as shipped) on the same host as a Baton left in
// protected mode: its clients are not that host's programs, and every request
// through it is refused with a 401 that says to use keys, although HAProxy
// connects from loopback. The same request straight to Baton is served.
func TestHAProxyBeforeProtectedModeIsRefused(t *testing.T) {
	b := batontest.Start(t, batontest.Options{})
	hp := startHAProxy(t, []string{b.Addr, b.Addr, b.Addr})
	for i := range 3 {
		hp.await(t, server(i), isUp) // /readyz is open: the checks pass
	}
	post := func(base string) (int, string) {
		t.Helper()
		res, err := http.Post(base+"/v1/locks/deploy-protected", "application/json", strings.NewReader(`{"ttl_ms": 60000}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var p struct{ Detail string }
		_ = json.NewDecoder(res.Body).Decode(&p)
		return res.StatusCode, p.Detail
	}
	if st, detail := post(hp.URL); st != http.StatusUnauthorized || !strings.Contains(detail, "through a proxy") || !strings.Contains(detail, "BATON_AUTH_FILE") {
		t.Errorf("through HAProxy: %d %q, want 401 saying to use keys", st, detail)
	}
	if st, _ := post(b.URL); st != http.StatusCreated {
		t.Errorf("straight to Baton: %d, want 201", st)
	}
}
