package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
)

// Tests of the caps on live objects (API.md, "Keys"): a key may have at most
// max_holds holds, max_tickets tickets and max_sessions sessions in Redis at
// once; past them it gets 429 too-many-objects, and other keys are served.

// capKeys are two API keys: capped, whose entry sets the caps a test gives,
// and other, which sets none.
type capKeys struct{ capped, other string }

func newCapKeys() capKeys { return capKeys{capped: auth.NewKey(), other: auth.NewKey()} }

// file is the keys file with caps (YAML lines, indented for a key entry) on
// capped.
func (k capKeys) file(caps string) string {
	return fmt.Sprintf(`keys:
  - name: capped
    sha256: %s
    allow:
      - names: "*"
        actions: [lock, read]
%s  - name: other
    sha256: %s
    allow:
      - names: "*"
        actions: [lock, read]
`, auth.KeySHA256(k.capped), caps, auth.KeySHA256(k.other))
}

// post sends POST path with body as key.
func (e *env) post(key, path string, body map[string]any) *resp {
	e.t.Helper()
	return e.do(req{Method: "POST", Path: path, Body: body, Header: bearer(key)})
}

// wantCapped fails unless r is the 429 of a key at its cap: the detail names
// each of says (the key, the cap, where it is set) and Retry-After is 1 to 60.
func wantCapped(t *testing.T, r *resp, says ...string) {
	t.Helper()
	wantStatus(t, r, http.StatusTooManyRequests, "too-many-objects")
	for _, s := range says {
		if !strings.Contains(r.Str("detail"), s) {
			t.Errorf("detail %q does not say %q", r.Str("detail"), s)
		}
	}
	if n, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || n < 1 || n > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", r.Header.Get("Retry-After"))
	}
}

// capSets lists the Redis keys the caps are counted in.
func (e *env) capSets() []string {
	e.t.Helper()
	var out []string
	for _, k := range e.keys() {
		if strings.HasPrefix(k, e.Prefix+":u:") {
			out = append(out, k)
		}
	}
	return out
}

func TestKeyAtItsHoldCapIsRefusedAndOtherKeysAreServed(t *testing.T) {
	onBoth(t, testKeyAtItsHoldCap)
}

func testKeyAtItsHoldCap(t *testing.T, cluster bool) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file("    max_holds: 2\n")})
	a := e.post(k.capped, "/v1/locks/a", map[string]any{})
	wantStatus(t, a, http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/b", map[string]any{"shared": true}), http.StatusCreated, "")

	r := e.post(k.capped, "/v1/locks/c", map[string]any{})
	wantCapped(t, r, `"capped"`, "2 live holds", "max_holds in the keys file")
	if st := e.do(req{Method: "GET", Path: "/v1/locks/c", Header: bearer(k.capped)}); st.Bool("held") {
		t.Fatalf("a refused acquire left a hold: %s", st.Raw)
	}
	// Other keys are served, on that very lock too.
	wantStatus(t, e.post(k.other, "/v1/locks/c", map[string]any{}), http.StatusCreated, "")
	wantStatus(t, e.post(k.other, "/v1/locks/d", map[string]any{}), http.StatusCreated, "")

	// A re-entry makes no new hold: it is served at the cap. Its hold counts
	// until its last release.
	wantStatus(t, e.post(k.capped, "/v1/locks/a", map[string]any{"lease": a.Str("lease")}), http.StatusOK, "")
	rel := e.do(req{Method: "DELETE", Path: a.Str("url"), Header: bearer(k.capped)})
	if wantStatus(t, rel, http.StatusOK, ""); rel.Bool("released") {
		t.Fatalf("first release of a count of 2: %s", rel.Raw)
	}
	wantCapped(t, e.post(k.capped, "/v1/locks/e", map[string]any{}))
	rel = e.do(req{Method: "DELETE", Path: a.Str("url"), Header: bearer(k.capped)})
	if wantStatus(t, rel, http.StatusOK, ""); !rel.Bool("released") {
		t.Fatalf("last release: %s", rel.Raw)
	}
	wantStatus(t, e.post(k.capped, "/v1/locks/e", map[string]any{}), http.StatusCreated, "")
	wantCapped(t, e.post(k.capped, "/v1/locks/f", map[string]any{}))
}

// A hold that runs out leaves its key's count; a renewed one (a lease or a
// session renewed) counts on past the deadline it was made with.
func TestKeyHoldCountFollowsExpiryAndRenewal(t *testing.T) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Keys: k.file("    max_holds: 2\n    max_sessions: 2\n")})
	short := e.post(k.capped, "/v1/locks/short", map[string]any{"ttl_ms": 300})
	wantStatus(t, short, http.StatusCreated, "")
	renewed := e.post(k.capped, "/v1/locks/renewed", map[string]any{"ttl_ms": 300})
	wantStatus(t, renewed, http.StatusCreated, "")
	wantCapped(t, e.post(k.capped, "/v1/locks/x", map[string]any{}))
	p := e.do(req{Method: "PATCH", Path: renewed.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: bearer(k.capped)})
	wantStatus(t, p, http.StatusOK, "")

	// short runs out: one more hold fits (once, within a few seconds: a
	// hold that runs out may count up to 2 s longer). renewed still counts.
	pollUntil(t, 10*time.Second, "a hold that ran out leaves the count", func() bool {
		time.Sleep(50 * time.Millisecond)
		return e.post(k.capped, "/v1/locks/x", map[string]any{}).Status == http.StatusCreated
	})
	wantCapped(t, e.post(k.capped, "/v1/locks/y", map[string]any{}))

	// A session renewed keeps itself and its holds counted past the deadline
	// it was made with: once a session made after it with the same life has
	// run out (its place is free again), the renewed one still counts.
	wantStatus(t, e.do(req{Method: "DELETE", Path: renewed.Str("url"), Header: bearer(k.capped)}), http.StatusOK, "")
	sess := e.post(k.capped, "/v1/sessions", map[string]any{"ttl_ms": 500})
	wantStatus(t, sess, http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/sessions", map[string]any{"ttl_ms": 500}), http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/in-session", map[string]any{"session": sess.Str("session")}), http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "PATCH", Path: sess.Str("url"), Body: map[string]any{"ttl_ms": 60000}, Header: bearer(k.capped)}),
		http.StatusOK, "")
	pollUntil(t, 10*time.Second, "a session that ran out leaves the count", func() bool {
		time.Sleep(50 * time.Millisecond)
		return e.post(k.capped, "/v1/sessions", map[string]any{}).Status == http.StatusCreated
	})
	wantCapped(t, e.post(k.capped, "/v1/locks/z", map[string]any{}), "2 live holds")
	wantCapped(t, e.post(k.capped, "/v1/sessions", map[string]any{}), "2 live sessions", "max_sessions")
}

// A request that waits for a lock holds its place among its key's holds
// while it waits, and gives it back when its client gives up (the request is
// undone).
func TestWaitingAcquireCountsUntilItsClientLeaves(t *testing.T) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Keys: k.file("    max_holds: 1\n")})
	wantStatus(t, e.post(k.other, "/v1/locks/busy", map[string]any{}), http.StatusCreated, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := e.send(req{Method: "POST", Path: "/v1/locks/busy", Body: map[string]any{"wait_ms": 30000}, Header: bearer(k.capped),
		Context: ctx})
	e.awaitWaiters(1)
	wantCapped(t, e.post(k.capped, "/v1/locks/free", map[string]any{}), "1 live holds")
	cancel()
	<-w
	pollUntil(t, 10*time.Second, "the count after the waiting client left", func() bool {
		time.Sleep(20 * time.Millisecond)
		return e.post(k.capped, "/v1/locks/free", map[string]any{}).Status == http.StatusCreated
	})
}

func TestKeyAtItsTicketCap(t *testing.T) { onBoth(t, testKeyAtItsTicketCap) }

func testKeyAtItsTicketCap(t *testing.T, cluster bool) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file("    max_tickets: 1\n")})
	held := map[string]*resp{}
	for _, name := range []string{"q1", "q2", "q3"} {
		held[name] = e.post(k.other, "/v1/locks/"+name, map[string]any{})
		wantStatus(t, held[name], http.StatusCreated, "")
	}
	fair := map[string]any{"fair": true}
	t1 := e.post(k.capped, "/v1/locks/q1", fair)
	wantStatus(t, t1, http.StatusAccepted, "")
	wantCapped(t, e.post(k.capped, "/v1/locks/q2", fair), `"capped"`, "1 live tickets", "max_tickets in the keys file")
	wantStatus(t, e.post(k.other, "/v1/locks/q2", fair), http.StatusAccepted, "") // another key is served

	// A cancelled ticket leaves the count.
	wantStatus(t, e.do(req{Method: "DELETE", Path: t1.Str("url"), Header: bearer(k.capped)}), http.StatusNoContent, "")
	t2 := e.post(k.capped, "/v1/locks/q1", fair)
	wantStatus(t, t2, http.StatusAccepted, "")
	wantCapped(t, e.post(k.capped, "/v1/locks/q3", fair))

	// A ticket granted and claimed is a hold, no longer a ticket.
	wantStatus(t, e.do(req{Method: "DELETE", Path: held["q1"].Str("url"), Header: bearer(k.other)}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "GET", Path: t2.Str("url") + "?wait_ms=5000", Header: bearer(k.capped)}), http.StatusOK, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/q3", fair), http.StatusAccepted, "")
}

// A fair request whose client gives up while it waits is undone: its ticket
// leaves the queue and its key's count.
func TestFairWaitGivenUpLeavesItsKeysTicketCount(t *testing.T) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Keys: k.file("    max_tickets: 1\n")})
	for _, name := range []string{"u", "v"} {
		wantStatus(t, e.post(k.other, "/v1/locks/"+name, map[string]any{}), http.StatusCreated, "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := e.send(req{Method: "POST", Path: "/v1/locks/u", Body: map[string]any{"fair": true, "wait_ms": 30000},
		Header: bearer(k.capped), Context: ctx})
	e.awaitWaiters(1)
	pollUntil(t, 10*time.Second, "the waiting request's ticket", func() bool {
		st := e.do(req{Method: "GET", Path: "/v1/locks/u", Header: bearer(k.capped)})
		return st.Int("waiters") == 1
	})
	wantCapped(t, e.post(k.capped, "/v1/locks/v", map[string]any{"fair": true}), "1 live tickets")
	cancel()
	<-w
	pollUntil(t, 10*time.Second, "the count after the waiting client left", func() bool {
		time.Sleep(20 * time.Millisecond)
		return e.post(k.capped, "/v1/locks/v", map[string]any{"fair": true}).Status == http.StatusAccepted
	})
	if st := e.do(req{Method: "GET", Path: "/v1/locks/u", Header: bearer(k.capped)}); st.Int("waiters") != 0 {
		t.Fatalf("the given-up request's ticket is still queued: %s", st.Raw)
	}
}

func TestKeyAtItsSessionCap(t *testing.T) { onBoth(t, testKeyAtItsSessionCap) }

func testKeyAtItsSessionCap(t *testing.T, cluster bool) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file("    max_sessions: 1\n    max_holds: 2\n")})
	idem := map[string]string{"Authorization": "Bearer " + k.capped, "Idempotency-Key": "s-1"}
	s1 := e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 30000}, Header: idem})
	wantStatus(t, s1, http.StatusCreated, "")
	wantCapped(t, e.post(k.capped, "/v1/sessions", map[string]any{}), `"capped"`, "1 live sessions", "max_sessions in the keys file")
	wantStatus(t, e.post(k.other, "/v1/sessions", map[string]any{}), http.StatusCreated, "")
	// A retry with the session's Idempotency-Key makes nothing: it is answered at the cap.
	again := e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 30000}, Header: idem})
	if wantStatus(t, again, http.StatusCreated, ""); again.Str("session") != s1.Str("session") {
		t.Fatalf("retry: %s, want session %s", again.Raw, s1.Str("session"))
	}

	// A session's holds are holds.
	in := map[string]any{"session": s1.Str("session")}
	for _, name := range []string{"s:a", "s:b"} {
		wantStatus(t, e.post(k.capped, "/v1/locks/"+name, in), http.StatusCreated, "")
	}
	wantCapped(t, e.post(k.capped, "/v1/locks/s:c", in), "2 live holds")
	wantCapped(t, e.post(k.capped, "/v1/locks/s:c", map[string]any{}), "2 live holds")

	// Its end takes it and its holds out of the counts.
	end := e.do(req{Method: "DELETE", Path: s1.Str("url"), Header: bearer(k.capped)})
	if wantStatus(t, end, http.StatusOK, ""); end.Int("released") != 2 {
		t.Fatalf("session end: %s", end.Raw)
	}
	s2 := e.post(k.capped, "/v1/sessions", map[string]any{})
	wantStatus(t, s2, http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/s:c", map[string]any{"session": s2.Str("session")}), http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/s:d", map[string]any{}), http.StatusCreated, "")
}

// Protected and off mode's one principal, which all their clients share, is
// not capped by the caps keys get by default; only by those the environment
// sets (BATON_KEY_MAX_HOLDS, ...), and then the 429 says so. Uncapped, it
// costs Redis nothing more.
func TestBuiltinPrincipalIsCappedOnlyWhenTheEnvironmentSaysSo(t *testing.T) {
	keyDefaults := auth.Caps{Holds: 1, Tickets: 1, Sessions: 1}
	e := newEnv(t, envOptions{Protected: true, KeyCaps: keyDefaults})
	for _, name := range []string{"p1", "p2", "p3"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{}}), http.StatusCreated, "")
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{}}), http.StatusCreated, "")
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/p1", Body: map[string]any{"fair": true}}), http.StatusAccepted, "")
	}
	if sets := e.capSets(); len(sets) != 0 {
		t.Errorf("uncapped, Redis has count sets %v, want none", sets)
	}

	e = newEnv(t, envOptions{Protected: true, KeyCaps: keyDefaults, BuiltinCaps: auth.Caps{Holds: 2}})
	for _, name := range []string{"p1", "p2"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{}}), http.StatusCreated, "")
	}
	wantCapped(t, e.do(req{Method: "POST", Path: "/v1/locks/p3", Body: map[string]any{}}), "@loopback", "2 live holds", "BATON_KEY_MAX_HOLDS")
	for range 3 {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{}}), http.StatusCreated, "")
	}
}

// Once a key's objects have ended (released, run out, expired), nothing of
// their counts is left in Redis: each count expires with the latest deadline
// it held.
func TestCountsLeaveNothingInRedisOnceObjectsEnd(t *testing.T) { onBoth(t, testCountsLeaveNothing) }

func testCountsLeaveNothing(t *testing.T, cluster bool) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: 300 * time.Millisecond,
		Keys: k.file("    max_holds: 10\n    max_tickets: 10\n    max_sessions: 10\n")})
	wantStatus(t, e.post(k.other, "/v1/locks/held", map[string]any{"ttl_ms": 300}), http.StatusCreated, "")
	short := map[string]any{"ttl_ms": 300}
	wantStatus(t, e.post(k.capped, "/v1/locks/runs-out", short), http.StatusCreated, "")
	rel := e.post(k.capped, "/v1/locks/released", short)
	wantStatus(t, rel, http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/held", map[string]any{"fair": true}), http.StatusAccepted, "")
	sess := e.post(k.capped, "/v1/sessions", short)
	wantStatus(t, sess, http.StatusCreated, "")
	wantStatus(t, e.post(k.capped, "/v1/locks/in-session", map[string]any{"session": sess.Str("session")}), http.StatusCreated, "")
	if sets := e.capSets(); len(sets) != 3 {
		t.Fatalf("count sets %v, want the key's three (holds, tickets, sessions)", sets)
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: rel.Str("url"), Header: bearer(k.capped)}), http.StatusOK, "")
	pollUntil(t, 15*time.Second, "the count sets to expire", func() bool {
		time.Sleep(20 * time.Millisecond)
		return len(e.capSets()) == 0
	})
}

// A retry with an Idempotency-Key that is refused (another body) changes
// nothing: once what the key made has ended, its place is free again, however
// long a life the refused retry asked for.
func TestRefusedRetryLeavesNoCountBehindWhatItsKeyMade(t *testing.T) {
	k := newCapKeys()
	e := newEnv(t, envOptions{Keys: k.file("    max_holds: 1\n    max_sessions: 1\n")})
	idem := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + k.capped, "Idempotency-Key": key}
	}
	short, long := map[string]any{"ttl_ms": 300}, map[string]any{"ttl_ms": 600000, "wait_ms": 5000}
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/h", Body: short, Header: idem("h-1")}), http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/h", Body: long, Header: idem("h-1")}),
		http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: short, Header: idem("s-1")}), http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 600000}, Header: idem("s-1")}),
		http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	pollUntil(t, 15*time.Second, "a hold once the one made ran out", func() bool {
		time.Sleep(50 * time.Millisecond)
		return e.post(k.capped, "/v1/locks/x", map[string]any{}).Status == http.StatusCreated
	})
	pollUntil(t, 15*time.Second, "a session once the one made ran out", func() bool {
		time.Sleep(50 * time.Millisecond)
		return e.post(k.capped, "/v1/sessions", map[string]any{}).Status == http.StatusCreated
	})
}

// A retry of a fair request that was granted makes nothing new: it gets its
// lease again even when its key is at max_holds (its own hold among them) or
// at max_tickets.
func TestRetryOfAGrantedFairRequestIsAnsweredAtTheCaps(t *testing.T) {
	for _, caps := range []string{"    max_holds: 1\n", "    max_holds: 5\n    max_tickets: 1\n"} {
		k := newCapKeys()
		e := newEnv(t, envOptions{Keys: k.file(caps)})
		idem := map[string]string{"Authorization": "Bearer " + k.capped, "Idempotency-Key": "f-1"}
		first := e.do(req{Method: "POST", Path: "/v1/locks/f", Body: map[string]any{"fair": true}, Header: idem})
		wantStatus(t, first, http.StatusCreated, "")
		// The key's other ticket fills max_tickets (when it is 1).
		wantStatus(t, e.post(k.other, "/v1/locks/busy", map[string]any{}), http.StatusCreated, "")
		if strings.Contains(caps, "max_tickets") {
			wantStatus(t, e.post(k.capped, "/v1/locks/busy", map[string]any{"fair": true}), http.StatusAccepted, "")
		}
		again := e.do(req{Method: "POST", Path: "/v1/locks/f", Body: map[string]any{"fair": true}, Header: idem})
		if again.Status >= 300 || again.Str("lease") != first.Str("lease") {
			t.Fatalf("caps %q: retry of a granted fair request: %d %s, want lease %s", caps, again.Status, again.Raw, first.Str("lease"))
		}
	}
}
