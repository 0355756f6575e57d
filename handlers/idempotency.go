package handlers

import (
	"net/http"
	"strings"
)

// maxIdemKey is the longest Idempotency-Key accepted.
const maxIdemKey = 255

// idempotencyKey reads the request's Idempotency-Key (IETF
// draft-ietf-httpapi-idempotency-key-header): 1 to 255 visible ASCII characters,
// sent bare or as a structured-field string ("..."). It returns "" when there is
// none, and a *validationError naming the header when it is malformed or sent
// twice.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", invalid("Idempotency-Key", "must be sent once")
	}
	k := vs[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" || len(k) > maxIdemKey {
		return "", invalid("Idempotency-Key", "must be 1 to 255 visible ASCII characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e || k[i] == '"' || k[i] == '\\' {
			return "", invalid("Idempotency-Key", "must be 1 to 255 visible ASCII characters")
		}
	}
	return strings.Clone(k), nil
}

// replayed marks an answer that replays what an earlier request with the same
// Idempotency-Key made.
func replayed(w http.ResponseWriter, yes bool) {
	if yes {
		w.Header().Set("Idempotent-Replayed", "true")
	}
}
