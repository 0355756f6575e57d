package auth_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/auth"
)

// The order in which the HTTP layer uses a Guard: authenticate, rate-limit,
// authorize, and count a long-poll. Statuses and bodies are the problem
// writer's; this example only prints what it would be told.
func Example() {
	g, err := auth.NewGuard(auth.Config{Logger: zerolog.Nop()}) // protected mode
	if err != nil {
		panic(err)
	}
	guard := func(lock string, longPoll bool, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := g.Authenticate(r)
			if err != nil { // 401, WWW-Authenticate: auth.Challenge, detail err.Error()
				w.Header().Set("WWW-Authenticate", auth.Challenge)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			if ok, after := p.Allow(); !ok { // 429 rate-limited
				w.Header().Set("Retry-After", strconv.Itoa(int(after.Seconds())))
				http.Error(w, "rate-limited", http.StatusTooManyRequests)
				return
			}
			if err := p.Authorize(auth.ActionLock, lock); errors.Is(err, auth.ErrForbidden) {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			if longPoll {
				if !p.AcquireWaiter() { // 429 too-many-waiters
					http.Error(w, "too-many-waiters", http.StatusTooManyRequests)
					return
				}
				defer p.ReleaseWaiter()
			}
			// Handlers get p (a context value, say): p.Name() for logs and
			// metrics, p.ID() for the store; never a key.
			fmt.Fprint(w, p.Name())
			next.ServeHTTP(w, r)
		})
	}
	h := guard("reports", true, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, peer := range []string{"127.0.0.1:50000", "192.0.2.7:50000"} {
		r := httptest.NewRequest(http.MethodPost, "http://localhost:8080/v1/locks/reports", nil)
		r.RemoteAddr = peer
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			fmt.Println(w.Code, w.Body.String())
		} else {
			fmt.Println(w.Code, w.Header().Get("WWW-Authenticate"))
		}
	}
	// Output:
	// 200 @loopback
	// 401 Bearer realm="baton"
}
