package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/batonhq/baton/store"
)

// Limits are the configured bounds on request values.
type Limits struct {
	DefaultTTL time.Duration
	MinTTL     time.Duration
	MaxTTL     time.Duration
	MaxWait    time.Duration
	// BodyReadTimeout bounds how long a request body may take to arrive, from
	// the moment its headers are in (408 request-timeout past it); 0 means
	// DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
}

// DefaultBodyReadTimeout is the body read timeout when Limits leave it at 0: a
// 16 KiB body arrives well within it even over a slow mobile link.
const DefaultBodyReadTimeout = 10 * time.Second

// lockName returns the {name} path parameter, or errInvalidName. Names match
// ^[A-Za-z0-9._:-]{1,200}$, so they never hold '{' or '}' and every key of one lock
// shares a Redis Cluster hash slot. "." and ".." match too but are not names: they
// are dot-segments (RFC 3986, 5.2.4), which curl, browsers and most HTTP libraries
// remove before sending a path, so the lease URLs of such a lock would reach
// another resource and its holder could neither renew nor release it.
//
// chi routes on the escaped path, so the parameter may carry percent-encoded
// characters (JavaScript's encodeURIComponent and Python's quote encode ':'):
// it is unescaped first (RFC 3986, 2.3: an encoded unreserved character is that
// character), and the rules apply to what it encodes.
func lockName(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if r.URL.RawPath != "" { // chi routed on the escaped path (Go keeps it only when it is not Path's own encoding)
		var err error
		if name, err = url.PathUnescape(name); err != nil {
			return "", errInvalidName
		}
	}
	if len(name) == 0 || len(name) > 200 || name == "." || name == ".." || !store.NameChars(name) {
		return "", errInvalidName
	}
	return name, nil
}

// readRequest reads what the lock routes without query parameters start with:
// the lock name, no query, and, when body is not nil, the JSON body into it.
func readRequest(w http.ResponseWriter, r *http.Request, body any) (string, error) {
	name, err := lockName(r)
	if err == nil {
		err = checkQuery(r)
	}
	if err == nil && body != nil {
		err = decodeJSON(w, r, body)
	}
	return name, err
}

// checkQuery rejects query parameters the route does not take, so that a typo
// (wait for wait_ms) never passes silently.
func checkQuery(r *http.Request, allowed ...string) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &validationError{detail: "The query string is malformed."}
	}
	var bad map[string]string
	for k := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			if bad == nil {
				bad = map[string]string{}
			}
			bad[k] = "unknown parameter"
		}
	}
	if bad != nil {
		return &validationError{detail: "The request has unknown query parameters.", fields: bad}
	}
	return nil
}

// queryInt reads an optional non-negative integer query parameter.
func queryInt(r *http.Request, name string) (*int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		if r.URL.Query().Has(name) {
			return nil, invalid(name, "must be a non-negative integer")
		}
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, invalid(name, "must be a non-negative integer")
	}
	return &n, nil
}

// ttl validates an optional ttl_ms against the limits; absent means def.
func (l Limits) ttl(ms *int64, def time.Duration) (time.Duration, error) {
	if ms == nil {
		return def, nil
	}
	d := time.Duration(*ms) * time.Millisecond
	if *ms < l.MinTTL.Milliseconds() || *ms > l.MaxTTL.Milliseconds() {
		return 0, invalid("ttl_ms", fmt.Sprintf("must be between %d and %d", l.MinTTL.Milliseconds(), l.MaxTTL.Milliseconds()))
	}
	return d, nil
}

// wait resolves how long a request may block: wait_ms when given, else a
// Prefer: wait=N header (RFC 7240, seconds), else 0. applied is the
// Preference-Applied value when the header was honoured. A value above the
// maximum is an error that names the maximum, never a silent clamp.
func (l Limits) wait(r *http.Request, ms *int64) (d time.Duration, applied string, err error) {
	maxMs := l.MaxWait.Milliseconds()
	if ms != nil {
		if *ms < 0 || *ms > maxMs {
			return 0, "", invalid("wait_ms", fmt.Sprintf("must be between 0 and %d", maxMs))
		}
		return time.Duration(*ms) * time.Millisecond, "", nil
	}
	secs, ok, err := preferWait(r.Header.Values("Prefer"))
	if err != nil || !ok {
		return 0, "", err
	}
	if secs > maxMs/1000 { // not secs*1000 > maxMs: that overflows, and a huge wait would pass
		return 0, "", invalid("Prefer", fmt.Sprintf("wait must be at most %d seconds", maxMs/1000))
	}
	return time.Duration(secs) * time.Second, "wait=" + strconv.FormatInt(secs, 10), nil
}

// preferWait finds wait=N among Prefer headers ("respond-async, wait=10").
func preferWait(values []string) (int64, bool, error) {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			tok, _, _ := strings.Cut(pref, ";") // parameters of a preference are ignored
			k, val, found := strings.Cut(strings.TrimSpace(tok), "=")
			if !found || !strings.EqualFold(strings.TrimSpace(k), "wait") {
				continue
			}
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
			if err != nil || n < 0 {
				return 0, false, invalid("Prefer", "wait must be a non-negative number of seconds")
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}

// longPoll is the query of a long-poll GET: wait_ms (or Prefer: wait=N) and, on
// the lock state, fence.
type longPoll struct {
	wait    time.Duration
	applied string
	fence   *int64
}

func (s *server) longPoll(r *http.Request, withFence bool) (longPoll, error) {
	allowed := []string{"wait_ms"}
	if withFence {
		allowed = append(allowed, "fence")
	}
	var p longPoll
	if err := checkQuery(r, allowed...); err != nil {
		return p, err
	}
	waitMs, err := queryInt(r, "wait_ms")
	if err != nil {
		return p, err
	}
	if withFence {
		if p.fence, err = queryInt(r, "fence"); err != nil {
			return p, err
		}
	}
	p.wait, p.applied, err = s.limits.wait(r, waitMs)
	return p, err
}

// apply sets Preference-Applied when a Prefer wait was honoured.
func (p longPoll) apply(w http.ResponseWriter) {
	if p.applied != "" {
		w.Header().Set("Preference-Applied", p.applied)
	}
}

// ttlOr validates an optional renewal ttl_ms (absent: 0, the lease's own ttl)
// unless an earlier step failed.
func (l Limits) ttlOr(ms *int64, err error) (time.Duration, error) {
	if err != nil {
		return 0, err
	}
	return l.ttl(ms, 0)
}
