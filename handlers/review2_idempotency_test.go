package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// Hostile review 2: Idempotency-Key.

// Two requests with one key wait for a busy lock (a client's retry after its
// first attempt seemed lost, while that attempt still waits). API: "Two
// concurrent requests with one key create one hold (count 1), never two, and
// both are answered with it (201, the same lease)". The release wakes one of
// them ('r' wakes one non-fair waiter); it is granted, and nothing wakes the
// other: no script announces a grant, and the waiter's timer now aims at the
// new hold's end. It sleeps until its wait is over and answers 423 lock-held,
// "nothing was made", though its key's hold is held, with the lease its twin
// was given.
func TestReview2IdemDuplicateWaiterAnswered423(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := e.acquire("nd", map[string]any{"ttl_ms": 30000, "owner": "H"})
	body := map[string]any{"ttl_ms": 30000, "wait_ms": 4000, "owner": "C"}
	a := e.parkWaiter("nd", body, withKey("nd-1", nil))
	b := e.parkWaiter("nd", body, withKey("nd-1", nil))
	e.release(h)
	ra := awaitAnswer(t, a, 10*time.Second).r
	rb := awaitAnswer(t, b, 10*time.Second).r
	for i, r := range []*resp{ra, rb} {
		if r.Status != http.StatusCreated {
			t.Errorf("duplicate %d: %d %s, want 201 with the key's lease", i, r.Status, r.Raw)
		}
	}
	if ra.Status == http.StatusCreated && rb.Status == http.StatusCreated && ra.Str("lease") != rb.Str("lease") {
		t.Errorf("two leases for one key: %s and %s", ra.Str("lease"), rb.Str("lease"))
	}
	if st := e.state("nd"); st.Int("holders") != 1 || st.Int("count") != 1 {
		t.Errorf("state %s: want one hold of count 1", st.Raw)
	}
}

// A re-entry (POST with "lease") sent with an Idempotency-Key, and retried
// after its answer was lost: the key is ignored (Acquire re-enters before it
// looks at the key), and the retry counts a second re-entry. The client
// releases once per re-entry it knows of, and the lock stays held, by
// nobody's intent, until the lease runs out. A key on a POST must either be
// honoured or refused, never silently dropped.
func TestReview2IdemReentryRetriedCountsTwice(t *testing.T) {
	e := newEnv(t, envOptions{})
	l := e.acquire("rk", map[string]any{"ttl_ms": 30000})
	body := map[string]any{"lease": l.Str("lease"), "ttl_ms": 30000}
	first := e.do(req{Method: "POST", Path: "/v1/locks/rk", Body: body, Header: withKey("re-1", nil)})
	wantStatus(t, first, http.StatusOK, "")
	retry := e.do(req{Method: "POST", Path: "/v1/locks/rk", Body: body, Header: withKey("re-1", nil)})
	if retry.Status == http.StatusOK && (retry.Int("count") != first.Int("count") || retry.Header.Get("Idempotent-Replayed") != "true") {
		t.Errorf("retry of a re-entry with the same Idempotency-Key: count %d (first answer %d), replayed %q: the key was ignored",
			retry.Int("count"), first.Int("count"), retry.Header.Get("Idempotent-Replayed"))
	}
	e.release(l)
	e.release(l) // one release per hold the client knows of
	if st := e.state("rk"); st.Bool("held") {
		t.Errorf("after releasing the grant and its one re-entry, the lock is still held: %s", st.Raw)
	}
}

// A hold asked for in a session with an Idempotency-Key: its session member
// is derived from the key, so a retry shares the first request's member.
// Whenever one of the two makes nothing (the first attempt's client hangs up
// while it waits; a retry with another body gets 422), the store drops "its"
// member, which is the other's too: the hold the key made stays held, in no
// session. Renewals skip it, so it runs out while its session is renewed; a
// DELETE of the session does not release it.
func TestReview2IdemSessionHoldLosesItsSession(t *testing.T) {
	t.Run("first attempt hangs up while its retry waits", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		s := e.newSession(map[string]any{"ttl_ms": 60000}, nil)
		h := e.acquire("si", map[string]any{"ttl_ms": 30000, "owner": "H"})
		body := map[string]any{"session": s.Str("session"), "wait_ms": 10000, "owner": "S"}
		ctx, hangUp := context.WithCancel(context.Background())
		first := e.send(req{Method: "POST", Path: "/v1/locks/si", Body: body, Header: withKey("si-1", nil), Context: ctx})
		e.awaitWaiters(1)
		retry := e.parkWaiter("si", body, withKey("si-1", nil))
		hangUp()
		<-first
		e.awaitWaiters(1)
		members := e.Prefix + ":s:{" + idHash(s.Str("session")) + "}:h"
		pollUntil(t, 5*time.Second, "the hung-up attempt's member forgotten (the retry shares it)", func() bool {
			return e.Redis.SCard(context.Background(), members).Val() == 0
		})
		e.release(h)
		got := awaitAnswer(t, retry, 5*time.Second).r
		wantStatus(t, got, http.StatusCreated, "")
		checkInSession(t, e, s, "si")
	})
	t.Run("a retry with another body gets 422", func(t *testing.T) {
		e := newEnv(t, envOptions{})
		s := e.newSession(map[string]any{"ttl_ms": 60000}, nil)
		l := e.do(req{Method: "POST", Path: "/v1/locks/sj", Body: map[string]any{"session": s.Str("session"), "owner": "S"},
			Header: withKey("sj-1", nil)})
		wantStatus(t, l, http.StatusCreated, "")
		bad := e.do(req{Method: "POST", Path: "/v1/locks/sj", Body: map[string]any{"session": s.Str("session"), "owner": "T"},
			Header: withKey("sj-1", nil)})
		wantStatus(t, bad, http.StatusUnprocessableEntity, "idempotency-key-mismatch")
		checkInSession(t, e, s, "sj")
	})
}

// checkInSession fails unless the session lists the lock's hold and its
// DELETE releases it.
func checkInSession(t *testing.T, e *env, s *resp, name string) {
	t.Helper()
	g := e.do(req{Method: "GET", Path: s.Str("url")})
	wantStatus(t, g, http.StatusOK, "")
	if g.Int("locks") != 1 {
		t.Errorf("the session lists %d holds, want 1 (%s's, made with its key): %s", g.Int("locks"), name, g.Raw)
	}
	d := e.do(req{Method: "DELETE", Path: s.Str("url")})
	wantStatus(t, d, http.StatusOK, "")
	if st := e.state(name); st.Bool("held") {
		t.Errorf("DELETE of the session (released %d) left its hold on %s held (ttl_ms %d)", d.Int("released"), name, st.Int("ttl_ms"))
	}
}

// A fair request with an Idempotency-Key and a wait is queued; its client
// hangs up (a proxy's 504, say) and never comes back. An idempotent request
// is never undone, by design, but nothing even ends its poll: the ticket stays
// marked as polled until the request's whole wait is over. The holder
// releases; the handoff takes the ticket for a polling waiter and grants it
// at its full ttl (60 s), claimed, to nobody. API: a grant to a waiter that is
// not polling is kept for at most ticket_ttl_ms, then passes on; "a dead
// waiter never holds the queue up for longer than ticket_ttl_ms".
func TestReview2IdemFairHangUpHoldsLockFullTTL(t *testing.T) {
	const tt = time.Second
	e := newEnv(t, envOptions{TicketTTL: tt})
	h := e.acquire("fh", map[string]any{"ttl_ms": 30000, "owner": "H"})
	ctx, hangUp := context.WithCancel(context.Background())
	a := e.send(req{Method: "POST", Path: "/v1/locks/fh", Context: ctx, Header: withKey("fh-1", nil),
		Body: map[string]any{"fair": true, "wait_ms": 20000, "ttl_ms": 60000, "owner": "F"}})
	pollUntil(t, 5*time.Second, "F queued", func() bool { return e.queueLen("fh") == 1 })
	hangUp()
	<-a
	e.awaitWaiters(0)
	w := e.parkWaiter("fh", map[string]any{"wait_ms": 6000, "owner": "W"})
	released := time.Now()
	e.release(h)
	got := awaitAnswer(t, w, 10*time.Second)
	if got.r.Status != http.StatusCreated || got.at.Sub(released) > tt+1500*time.Millisecond {
		st := e.state("fh")
		t.Errorf("waiter W: %d after %v, want 201 within the ticket ttl (%v): F's client left before the grant\nlock: %s",
			got.r.Status, got.at.Sub(released).Round(time.Millisecond), tt, st.Raw)
	}
}

// Force ends a hold made with an Idempotency-Key, but force.lua leaves its
// record alone: it lives on for the rest of the hold's ttl plus the grace,
// not the grace. API: a key is remembered "for as long as what its request
// created lives ... and BATON_IDEMPOTENCY_GRACE after that ends". Here, with a
// 1 s grace, the retry 3 s after the force is still 409 (and would be for ten
// minutes), and the record's memory stays for the forced hold's whole ttl.
func TestReview2IdemRecordOutlivesForcedHold(t *testing.T) {
	e := newEnv(t, envOptions{IdempotencyGrace: time.Second})
	body := map[string]any{"ttl_ms": 600000, "owner": "I"}
	l := e.do(req{Method: "POST", Path: "/v1/locks/fr", Body: body, Header: withKey("fr-1", nil)})
	wantStatus(t, l, http.StatusCreated, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/fr?force=true"}), http.StatusOK, "")
	time.Sleep(3 * time.Second) // the grace passing is the event
	ctx := context.Background()
	for _, k := range e.Redis.Keys(ctx, e.lockKey("fr")+":i:*").Val() {
		t.Errorf("idempotency record %s left 3 s after its hold was forced, with a 1 s grace (pttl %v)",
			k, e.Redis.PTTL(ctx, k).Val().Round(time.Second))
	}
	r := e.do(req{Method: "POST", Path: "/v1/locks/fr", Body: body, Header: withKey("fr-1", nil)})
	if r.Status != http.StatusCreated {
		t.Errorf("retry 3 s after the force, with a 1 s grace: %d %s, want 201 (a fresh request)", r.Status, r.Str("type"))
	}
}

// Redis restarts empty (no persistence, or a failover to a replica that never
// got the key): the secret idempotent ids are derived with (P:secret, made
// once with SET NX) is gone. A gateway that read it before keeps it in
// memory; a gateway that reads it now (started, or restarted, since) makes a
// new one. From then on the two derive different lease ids for the same key:
// a client's retry on the other gateway finds the key's record, but not its
// hold under the id it derives, and is told 409 idempotency-key-used (what
// the key made has ended) while the hold is held. BATON_SECRET set differently
// on two replicas does the same, and nothing notices either.
func TestReview2IdemSecretDivergesAfterRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	a := newEnv(t, envOptions{Redis: srv})
	b := newEnv(t, envOptions{Redis: srv, Prefix: a.Prefix})
	wantStatus(t, a.do(req{Method: "POST", Path: "/v1/locks/warm", Body: map[string]any{}, Header: withKey("w-1", nil)}), http.StatusCreated, "")

	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*env{a, b} {
		pollUntil(t, 10*time.Second, "ready after the restart", func() bool {
			r, err := e.try(req{Method: "GET", Path: "/readyz"})
			return err == nil && r.Status == http.StatusOK
		})
	}
	body := map[string]any{"ttl_ms": 30000, "owner": "C"}
	first := a.do(req{Method: "POST", Path: "/v1/locks/sec", Body: body, Header: withKey("sec-1", nil)})
	wantStatus(t, first, http.StatusCreated, "")
	retry := b.do(req{Method: "POST", Path: "/v1/locks/sec", Body: body, Header: withKey("sec-1", nil)})
	if retry.Status != http.StatusCreated || retry.Str("lease") != first.Str("lease") {
		t.Errorf("retry on the other gateway while the key's hold is held: %d %s %s, want 201 with lease %s",
			retry.Status, retry.Str("type"), retry.Str("lease"), first.Str("lease"))
	}
}

// A request's script runs and its answer is lost on a broken connection; the
// store sends it again, and the second run finds what the first made. The
// answer the client gets, the only one, says Idempotent-Replayed: true: for a
// session made without any Idempotency-Key (session_create.lua takes its own
// retry for a replay), and for an acquire with a key, whose one request made
// the hold. API: replays are answers to a retry; "every answer but the one
// that created it marked replayed".
func TestReview2StoreRetryMarkedReplayed(t *testing.T) {
	px := startProxy(t, sharedRedis.Addr())
	e := newEnv(t, envOptions{RedisURL: px.URL()})
	e.awaitReady()
	for _, rq := range []req{
		{Method: "POST", Path: "/v1/sessions", Body: map[string]any{"ttl_ms": 30000}},
		{Method: "POST", Path: "/v1/locks/cr", Body: map[string]any{"ttl_ms": 30000}, Header: withKey("cr-1", nil)},
	} {
		px.cutNextScript.Store(true)
		r := e.do(rq)
		select {
		case <-px.cuts:
		default:
			t.Fatalf("%s %s: the proxy cut no connection: the test proves nothing", rq.Method, rq.Path)
		}
		wantStatus(t, r, http.StatusCreated, "")
		if got := r.Header.Get("Idempotent-Replayed"); got != "" {
			t.Errorf("%s %s (Idempotency-Key %q), the client's first and only request: Idempotent-Replayed %q",
				rq.Method, rq.Path, rq.Header["Idempotency-Key"], got)
		}
	}
}
