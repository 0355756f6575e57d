package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/lua"
)

// Hostile review 2: sessions. A session's holds live in other slots than the
// session, so joining, renewing, looking and ending are separate calls; these
// tests put one between the others.

// A hold asked for in a session waits for a busy lock (wait_ms). Meanwhile its
// owner looks at the session (GET), as a heartbeat loop would, or renews it
// (PATCH): session_holds.lua finds the member with no hold yet ("gone") and
// the store forgets it (session leave). When the lock is then granted, the
// hold is in no session: the session says it has no locks, its renewals skip
// the hold, and the hold ends at the deadline the session had when the
// request joined, while the session, renewed, lives on. The client holds a
// lease it was told lasts as long as its session; another client gets the
// lock while the first still believes it holds it.
func TestReview2SessionWaiterForgottenByLook(t *testing.T) {
	for _, look := range []string{"GET", "PATCH"} {
		t.Run(look, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			s := e.newSession(map[string]any{"ttl_ms": 3000}, nil)
			sid := s.Str("session")
			h := e.acquire("sw", map[string]any{"ttl_ms": 30000, "owner": "H"})
			w := e.parkWaiter("sw", map[string]any{"session": sid, "wait_ms": 10000, "owner": "S"})

			var lk *resp
			if look == "GET" {
				lk = e.do(req{Method: "GET", Path: s.Str("url")})
			} else {
				lk = e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{}})
			}
			wantStatus(t, lk, http.StatusOK, "")

			e.release(h)
			got := awaitAnswer(t, w, 5*time.Second)
			wantStatus(t, got.r, http.StatusCreated, "")

			// The session's heartbeat: renewed to a minute.
			r := e.do(req{Method: "PATCH", Path: s.Str("url"), Body: map[string]any{"ttl_ms": 60000}})
			wantStatus(t, r, http.StatusOK, "")
			if r.Int("locks") != 1 {
				t.Errorf("session renewed after its hold was granted: locks %d, want 1 (the hold S was just granted in it): %s", r.Int("locks"), r.Raw)
			}
			time.Sleep(3500 * time.Millisecond) // past the session's first deadline
			if l := e.do(req{Method: "GET", Path: got.r.Str("url")}); l.Status != http.StatusOK {
				t.Errorf("the session's hold is %d %s 3.5 s in, though its session was renewed to 60 s", l.Status, l.Str("type"))
			}
			if o := e.do(req{Method: "POST", Path: "/v1/locks/sw", Body: map[string]any{"owner": "other"}}); o.Status != http.StatusLocked {
				t.Errorf("another client's acquire: %d, want 423: the session S renewed still holds the lock", o.Status)
			}
		})
	}
}

// A hold asked for in a session waits for a busy lock; its owner deletes the
// session (DELETE: "release every hold of the session ... and cancel its
// tickets", 200, released 0). The waiter is then granted anyway: the lock is
// held, in a session that no longer exists, until the deadline the session
// had when the request joined. Nothing of the session can release it (the
// session is 404), and with a long session ttl the lock is blocked for it.
func TestReview2SessionWaiterGrantedAfterDelete(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.newSession(map[string]any{"ttl_ms": 600000}, nil)
	sid := s.Str("session")
	h := e.acquire("sd", map[string]any{"ttl_ms": 30000, "owner": "H"})
	w := e.parkWaiter("sd", map[string]any{"session": sid, "wait_ms": 10000, "owner": "S"})

	d := e.do(req{Method: "DELETE", Path: s.Str("url")})
	wantStatus(t, d, http.StatusOK, "")
	e.release(h)
	got := awaitAnswer(t, w, 5*time.Second)
	if got.r.Status == http.StatusCreated {
		t.Errorf("a hold of a deleted session was granted: %s", got.r.Raw)
	}
	wantStatus(t, e.do(req{Method: "GET", Path: s.Str("url")}), http.StatusNotFound, "session-not-found")
	if st := e.state("sd"); st.Bool("held") {
		t.Errorf("the lock is held (ttl_ms %d) by the session deleted before the grant: %s", st.Int("ttl_ms"), st.Raw)
	}
}

// A session hold is re-entered the documented way (POST with "lease", no
// ttl_ms): the re-entry renews the hold to the default ttl (here 1 s), not
// to its session's deadline. The session (a minute) lives on, but its hold
// runs out after a second, before the session's next heartbeat; in the other
// direction (a session shorter than the default ttl) the hold outlives its
// session by the difference. A session's hold "lasts as long as the session".
func TestReview2SessionReentryLeavesTheSession(t *testing.T) {
	// The short session outlives taking and re-entering its hold on a loaded
	// machine, and ends well before the default ttl.
	lim := handlers.Limits{DefaultTTL: 4 * time.Second, MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second}
	e := newEnv(t, envOptions{Limits: lim})

	long := e.newSession(map[string]any{"ttl_ms": 60000}, nil)
	a := e.do(req{Method: "POST", Path: "/v1/locks/ra", Body: map[string]any{"session": long.Str("session")}})
	wantStatus(t, a, http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/ra", Body: map[string]any{"lease": a.Str("lease")}}), http.StatusOK, "")

	short := e.newSession(map[string]any{"ttl_ms": 1500}, nil)
	b := e.do(req{Method: "POST", Path: "/v1/locks/rb", Body: map[string]any{"session": short.Str("session")}})
	wantStatus(t, b, http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/rb", Body: map[string]any{"lease": b.Str("lease")}}), http.StatusOK, "")

	time.Sleep(2 * time.Second) // past the short session's end, within the default ttl
	wantStatus(t, e.do(req{Method: "GET", Path: short.Str("url")}), http.StatusNotFound, "session-not-found")
	if st := e.state("rb"); st.Bool("held") {
		t.Errorf("the session expired, but its re-entered hold is still held (ttl_ms %d): %s", st.Int("ttl_ms"), st.Raw)
	}
	time.Sleep(2500 * time.Millisecond) // past the default ttl
	if l := e.do(req{Method: "GET", Path: a.Str("url")}); l.Status != http.StatusOK {
		t.Errorf("a re-entered hold of a 60 s session is %d %s after 4.5 s: it was cut to the default ttl", l.Status, l.Str("type"))
	}
}

// A session that takes and releases one lock after another (a PHP worker's
// session: each request takes its locks and releases them) keeps a member
// per hold it ever took, until a renewal or a look prunes them: nothing
// removes a member when its hold is released (release.lua knows no session).
// Between two heartbeats the set grows with the request rate, not with the
// holds; and every renewal and delete then makes one script call per name it
// ever saw, one after another.
func TestReview2SessionMembersGrowWithRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.newSession(map[string]any{"ttl_ms": 60000}, nil)
	sid := s.Str("session")
	const n = 100
	for i := range n {
		name := "m" + strconv.Itoa(i)
		l := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{"session": sid}})
		wantStatus(t, l, http.StatusCreated, "")
		e.release(l)
	}
	members := e.Prefix + ":s:{" + idHash(sid) + "}:h"
	if got := e.Redis.SCard(context.Background(), members).Val(); got > 10 {
		t.Errorf("the session keeps %d members after %d holds were taken and released (0 live): %s grows with the requests", got, n, members)
	}
}

// DELETE of a session runs session_end.lua first, which marks the session
// ended and deletes its members, and only then releases each hold, lock by
// lock. When a lock's call fails (a Redis timeout: here the session holds
// script is held back in the network past the store's timeouts), the client
// gets 503 and retries, as Retry-After tells it to: the retry is 404
// session-not-found, and the holds stay held until the session's deadline
// (ten minutes here), with nothing left that names them. A transient error
// turns "release everything" into "release nothing", with no way to finish.
func TestReview2SessionDeleteNotRetryable(t *testing.T) {
	srv := redistest.Start(t)
	px := startDelayProxy(t, srv.Addr())
	e := newEnv(t, envOptions{Redis: srv, RedisURL: px.URL()})
	e.awaitReady() // scripts loaded: EVALSHA, no EVAL
	s := e.newSession(map[string]any{"ttl_ms": 600000}, nil)
	for _, n := range []string{"dr1", "dr2"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + n, Body: map[string]any{"session": s.Str("session")}}), http.StatusCreated, "")
	}

	px.arm([]byte(lua.Build(lua.Defaults).Func["session_holds"]))
	first := e.do(req{Method: "DELETE", Path: s.Str("url")})
	wantStatus(t, first, http.StatusServiceUnavailable, "store-unavailable")
	if px.heldCount() == 0 {
		t.Fatal("no session holds call was held back: the test proves nothing")
	}
	px.deliver() // the network is fine again (the held calls were looks: they change nothing)

	retry := e.do(req{Method: "DELETE", Path: s.Str("url")})
	if retry.Status != http.StatusOK {
		t.Errorf("the client's retry of DELETE after a 503: %d %s, want 200 (the first one released nothing)", retry.Status, retry.Str("type"))
	}
	for _, n := range []string{"dr1", "dr2"} {
		if st := e.state(n); st.Bool("held") {
			t.Errorf("%s still held (ttl_ms %d) by the session deleted with a retry", n, st.Int("ttl_ms"))
		}
	}
}

// A fair ticket carries a session; the lock is handed to it while its owner
// is not polling, so the grant waits for its claim, and the hold's ttl field
// is the session's remaining time at the handoff. The claim, a poll some
// seconds later, sets the hold to that ttl from the claim: past the session's
// deadline. The session expires unrenewed, and its hold lives on. API: "A
// session that is not renewed expires after its ttl_ms, and its holds with
// it (they share its deadline): nothing is left behind."
func TestReview2SessionTicketClaimOutlivesSession(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.newSession(map[string]any{"ttl_ms": 4000}, nil)
	h := e.acquire("tc", map[string]any{"ttl_ms": 30000, "owner": "H"})
	q := e.enqueue("tc", map[string]any{"session": s.Str("session"), "owner": "S"})
	e.release(h) // handed to S's ticket, unclaimed: S is not polling
	time.Sleep(2500 * time.Millisecond)
	l := e.poll(q.Str("url"), 0) // the claim
	wantStatus(t, l, http.StatusOK, "")
	time.Sleep(2000 * time.Millisecond) // past the session's deadline
	wantStatus(t, e.do(req{Method: "GET", Path: s.Str("url")}), http.StatusNotFound, "session-not-found")
	if st := e.state("tc"); st.Bool("held") {
		t.Errorf("the session expired unrenewed, but its hold is held for %d ms more: %s", st.Int("ttl_ms"), st.Raw)
	}
}

// A session's exclusive ticket heads a lock's queue, waiting for a shared hold
// to end; behind it waits a shared ticket of someone else, which would fit
// beside the shared hold but may not overtake the ticket ahead. The session
// is deleted: session_holds.lua drops the ticket and hands nothing on (it
// calls handoff only when it ended a hold; cancel.lua, for the same ticket
// cancelled directly, hands on at once). The shared ticket behind, long-
// polling, is not granted until its own wait ends (or the dead ticket's
// timer fires): here 8 s for a slot that was free at once. A non-fair shared
// waiter in the same place is even answered 423 with the slot free.
func TestReview2SessionEndDropsHeadTicketWithoutHandoff(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.newSession(map[string]any{"ttl_ms": 60000}, nil)
	e.share("sh", map[string]any{"ttl_ms": 30000, "owner": "R"})
	x := e.do(req{Method: "POST", Path: "/v1/locks/sh", Body: map[string]any{"session": s.Str("session"), "fair": true, "owner": "X"}})
	wantStatus(t, x, http.StatusAccepted, "")
	w := e.parkWaiter("sh", map[string]any{"fair": true, "shared": true, "wait_ms": 15000, "owner": "W"})
	pollUntil(t, 10*time.Second, "W queued behind X", func() bool { return e.queueLen("sh") == 2 })

	ended := time.Now()
	wantStatus(t, e.do(req{Method: "DELETE", Path: s.Str("url")}), http.StatusOK, "")
	got := awaitAnswer(t, w, 20*time.Second)
	if got.r.Status != http.StatusCreated || got.at.Sub(ended) > promptly {
		t.Errorf("shared ticket W behind the session's dropped ticket: %d after %v, want 201 at once (a shared slot is free)",
			got.r.Status, got.at.Sub(ended).Round(time.Millisecond))
	}
}
