package handlers_test

import (
	"context"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// Hostile review of shared holds and of the waits around them (review branch).
// Each test here fails on the code it was written against and demonstrates one
// defect; the comment above each says what it shows and what the contract
// promises instead.

// reviewEnv is an env on a redis-server of its own, so that its script calls
// can be counted (a waiter's first check is awaited that way: it announces
// itself nowhere else).
func reviewEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.Redis == nil {
		o.Redis = redistest.Start(t)
	}
	return newEnv(t, o)
}

// awaitCalls waits until the env's Redis has run at least n scripts.
func (e *env) awaitCalls(n int) {
	e.t.Helper()
	pollUntil(e.t, 10*time.Second, "script calls >= "+itoa(n), func() bool { return scriptCalls(e.t, e) >= n })
}

// parkChecked parks a long-poll (a non-fair acquire with a wait) and returns
// once it has made its first check after subscribing: two script calls, its
// try on arrival and that check.
func (e *env) parkChecked(name string, body map[string]any) <-chan answer {
	e.t.Helper()
	base := scriptCalls(e.t, e)
	ch := e.parkWaiter(name, body)
	e.awaitCalls(base + 2)
	return ch
}

// A non-fair shared waiter is blocked by an exclusive hold. The hold is
// released and the handoff grants the lone queued shared ticket: the queue is
// now empty and the lock shared without a limit, so the waiter fits at once
// (API: a shared request is granted when there is no exclusive hold, a free
// slot and no live ticket ahead). But a handoff that grants publishes only
// 'g:<ticket>', which wakes no non-fair waiter, and no 'r': the waiter sleeps
// until the shared hold ends or its wait runs out.
func TestReviewSharedWaiterSleepsThroughHandoffRun(t *testing.T) {
	e := reviewEnv(t, envOptions{})
	x := e.acquire("run", map[string]any{"ttl_ms": 30000, "owner": "X"})
	e.enqueue("run", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "T"})
	w := e.parkChecked("run", map[string]any{"shared": true, "wait_ms": 15000, "ttl_ms": 30000, "owner": "W"})

	released := time.Now()
	wantStatus(t, e.do(req{Method: "DELETE", Path: x.Str("url")}), http.StatusOK, "")
	st := e.do(req{Method: "GET", Path: "/v1/locks/run"})
	if st.Str("mode") != "shared" || st.Int("waiters") != 0 {
		t.Fatalf("after the release: %s, want T's shared hold and an empty queue", st.Raw)
	}
	got := awaitAnswer(t, w, 20*time.Second)
	if got.r.Status != http.StatusCreated {
		t.Fatalf("shared waiter W: %d after %v, want 201 at once: the lock was shared, unlimited, with nobody queued, since the release\n%s",
			got.r.Status, got.at.Sub(released).Round(time.Millisecond), got.r.Raw)
	}
	if late := got.at.Sub(released); late > promptly {
		t.Errorf("shared waiter W granted %v after the release, want at once", late)
	}
}

// Two shared holds under limit 2; two non-fair waiters: X exclusive (first),
// W shared with limit 2. A shared hold is released: the lock has a free slot
// and nobody queued. The release's 'r' wakes exactly one non-fair waiter, X,
// which finds the lock still held (by the other shared hold) and goes back to
// sleep without passing the wake on. W, which fits, is never told.
func TestReviewReleaseWakeSpentOnExclusiveWaiter(t *testing.T) {
	e := reviewEnv(t, envOptions{})
	a := e.acquire("slot", map[string]any{"shared": true, "limit": 2, "ttl_ms": 30000, "owner": "A"})
	e.acquire("slot", map[string]any{"shared": true, "limit": 2, "ttl_ms": 30000, "owner": "B"})
	e.parkChecked("slot", map[string]any{"wait_ms": 20000, "owner": "X"})
	w := e.parkChecked("slot", map[string]any{"shared": true, "limit": 2, "wait_ms": 15000, "ttl_ms": 30000, "owner": "W"})

	released := time.Now()
	wantStatus(t, e.do(req{Method: "DELETE", Path: a.Str("url")}), http.StatusOK, "")
	got := awaitAnswer(t, w, 20*time.Second)
	if got.r.Status != http.StatusCreated {
		t.Fatalf("shared waiter W: %d after %v, want 201 at once: a slot of 2 was free and nobody queued\n%s",
			got.r.Status, got.at.Sub(released).Round(time.Millisecond), got.r.Raw)
	}
	if late := got.at.Sub(released); late > promptly {
		t.Errorf("shared waiter W granted %v after the release, want at once", late)
	}
}

// A shared hold (no limit) and an exclusive ticket queued behind it; a non-fair
// shared waiter waits, kept out only by that ticket. The ticket is cancelled:
// nothing stands between the waiter and a hold any more. cancel.lua settles
// (nothing to hand over) and publishes nothing, so the waiter is never told.
func TestReviewCancelledTicketWakesNoSharedWaiter(t *testing.T) {
	e := reviewEnv(t, envOptions{})
	e.acquire("cx", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "S"})
	tk := e.enqueue("cx", map[string]any{"ttl_ms": 30000, "owner": "E"})
	w := e.parkChecked("cx", map[string]any{"shared": true, "wait_ms": 15000, "ttl_ms": 30000, "owner": "W"})

	cancelled := time.Now()
	wantStatus(t, e.do(req{Method: "DELETE", Path: tk.Str("url")}), http.StatusNoContent, "")
	got := awaitAnswer(t, w, 20*time.Second)
	if got.r.Status != http.StatusCreated {
		t.Fatalf("shared waiter W: %d after %v, want 201 at once: the only ticket ahead was cancelled\n%s",
			got.r.Status, got.at.Sub(cancelled).Round(time.Millisecond), got.r.Raw)
	}
	if late := got.at.Sub(cancelled); late > promptly {
		t.Errorf("shared waiter W granted %v after the cancel, want at once", late)
	}
}

// A shared hold (no limit), then an exclusive ticket E whose client never polls
// (it died), then a shared ticket T, polled with a long wait, and a non-fair
// shared waiter W. E expires after ticket_ttl_ms; T and W fit the shared hold
// beside them from then on. API: "a dead waiter never holds the queue up for
// longer than ticket_ttl_ms". Nothing runs a handoff when a ticket expires
// (expiry runs no script) and no timer aims at the head ticket's end, so T is
// granted only when its own poll ends (settle, at the poll's last check) and
// W not at all.
func TestReviewDeadHeadTicketHoldsUpSharedRun(t *testing.T) {
	const tt = time.Second
	e := reviewEnv(t, envOptions{TicketTTL: tt})
	e.acquire("dead", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "S"})
	e.enqueue("dead", map[string]any{"ttl_ms": 30000, "owner": "E"})
	dies := time.Now().Add(tt)
	q := e.enqueue("dead", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "T"})
	poll := e.send(req{Method: "GET", Path: q.Str("url") + "?wait_ms=15000"})
	e.awaitWaiters(1)
	w := e.parkChecked("dead", map[string]any{"shared": true, "wait_ms": 15000, "ttl_ms": 30000, "owner": "W"})

	got := awaitAnswer(t, poll, 20*time.Second)
	if got.r.Status != http.StatusOK {
		t.Errorf("ticket T: %d, want 200 (granted)\n%s", got.r.Status, got.r.Raw)
	} else if late := got.at.Sub(dies); late > tt+promptly {
		t.Errorf("shared ticket T granted %v after the dead ticket ahead of it expired, want within ticket_ttl_ms of that (its poll's own end granted it)",
			late.Round(time.Millisecond))
	}
	gw := awaitAnswer(t, w, 20*time.Second)
	if gw.r.Status != http.StatusCreated {
		t.Errorf("shared waiter W: %d %v after the dead ticket expired, want 201 once it had\n%s",
			gw.r.Status, gw.at.Sub(dies).Round(time.Millisecond), gw.r.Raw)
	}
}

// A watch on a shared lock "returns on any change of the holds". A second
// shared hold is granted to a plain acquire: no script publishes anything for
// a grant that needs no handoff, so the watch sleeps through it until its
// timer at the first hold's end or its own wait.
func TestReviewWatchSleepsThroughAddedSharedHold(t *testing.T) {
	e := reviewEnv(t, envOptions{})
	e.acquire("sw", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "A"})
	base := scriptCalls(t, e)
	watch := e.send(req{Method: "GET", Path: "/v1/locks/sw?wait_ms=15000"})
	e.awaitWaiters(1)
	e.awaitCalls(base + 2) // its first state, then its check once subscribed

	added := time.Now()
	e.acquire("sw", map[string]any{"shared": true, "ttl_ms": 30000, "owner": "B"})
	got := awaitAnswer(t, watch, 20*time.Second)
	wantStatus(t, got.r, http.StatusOK, "")
	if got.r.Int("holders") != 2 {
		t.Fatalf("watch answered %s, want B's hold among 2", got.r.Raw)
	}
	if late := got.at.Sub(added); late > promptly {
		t.Errorf("the watch returned %v after a shared hold was added, want at once (it slept through the change)", late.Round(time.Millisecond))
	}
}

// A holder renews to a shorter ttl (PATCH ttl_ms 500 on a 30 s lease). The
// waiter's timer stays at the old lease end (observe only moves a timer
// earlier when it learns of an earlier end, and a renewal announces nothing),
// so when the lease runs out 500 ms later the waiter sleeps through the free
// lock. API: "for expiry, within 50 ms of the moment the lease ran out". The
// same holds for a shared hold renewed shorter, and for unpoll.lua cutting a
// claimed grant back to the ticket ttl (the waiters' timers sit at the full
// ttl of the 'g' message).
func TestReviewRenewShorterLeavesWaiterAsleep(t *testing.T) {
	for _, tc := range []struct{ give, mode string }{{"exclusive", "x"}, {"shared limit 1", "s"}} {
		t.Run(tc.give, func(t *testing.T) {
			e := reviewEnv(t, envOptions{})
			body := map[string]any{"ttl_ms": 30000, "owner": "H"}
			if tc.mode == "s" {
				body["shared"], body["limit"] = true, 1
			}
			h := e.acquire("short", body)
			w := e.parkChecked("short", map[string]any{"wait_ms": 15000, "owner": "W"})

			r := e.do(req{Method: "PATCH", Path: h.Str("url"), Body: map[string]any{"ttl_ms": 500}})
			wantStatus(t, r, http.StatusOK, "")
			end := parseStamp(t, r.Str("expires_at"))
			got := awaitAnswer(t, w, 20*time.Second)
			if got.r.Status != http.StatusCreated {
				t.Fatalf("waiter W: %d %v after the renewed lease ran out, want 201 within 50 ms\n%s",
					got.r.Status, got.at.Sub(end).Round(time.Millisecond), got.r.Raw)
			}
			if late := parseStamp(t, got.r.Str("acquired_at")).Sub(end); late > promptly {
				t.Errorf("lease end -> grant %v, want at the lease end (< %v), not at the wait's end", late, promptly)
			}
		})
	}
}

// Two polls of one ticket overlap (a client that retries a long-poll whose
// answer it stopped waiting for, e.g. after a proxy's 504, while the first is
// still in flight on the server). The first ends (its wait is over): poll.lua
// with poll ms 0 sets the ticket's poll mark to 0 and its life to the ticket
// ttl from now, though the second poll is still in flight. API: "a poll in
// flight keeps it alive". The ticket expires under the second poll; the
// release hands the lock to nobody, and the second poll ends 410.
func TestReviewOverlappingPollsLoseTicket(t *testing.T) {
	const tt = time.Second
	e := reviewEnv(t, envOptions{TicketTTL: tt})
	h := e.acquire("twice", map[string]any{"ttl_ms": 30000, "owner": "H"})
	q := e.enqueue("twice", map[string]any{"ttl_ms": 30000, "owner": "T"})
	first := e.send(req{Method: "GET", Path: q.Str("url") + "?wait_ms=1500"})
	e.awaitWaiters(1)
	second := e.send(req{Method: "GET", Path: q.Str("url") + "?wait_ms=20000"})
	e.awaitWaiters(2)

	wantStatus(t, awaitAnswer(t, first, 10*time.Second).r, http.StatusAccepted, "")
	time.Sleep(tt + 500*time.Millisecond) // the ticket ttl passes; the second poll is still in flight
	wantStatus(t, e.do(req{Method: "DELETE", Path: h.Str("url")}), http.StatusOK, "")
	got := awaitAnswer(t, second, 25*time.Second)
	if got.r.Status != http.StatusOK {
		t.Fatalf("the poll still in flight: %d, want 200 (its ticket alive, granted at the release)\n%s", got.r.Status, got.r.Raw)
	}
}

// A shared hold renewed to a shorter ttl runs out. Nothing of the name may be
// left in Redis but the fence key once nothing holds or waits; here the shared
// holds' sorted set and limit key stay behind (with a stale member) for as
// long as the longest ttl ever set on them, ten minutes, until some script of
// the lock happens to prune them.
func TestReviewSharedKeysOutliveTheirHolds(t *testing.T) {
	e := newEnv(t, envOptions{})
	l := e.acquire("leak", map[string]any{"shared": true, "limit": 3, "ttl_ms": 600000})
	r := e.do(req{Method: "PATCH", Path: l.Str("url"), Body: map[string]any{"ttl_ms": 200}})
	wantStatus(t, r, http.StatusOK, "")
	time.Sleep(600 * time.Millisecond) // the renewed hold runs out
	ctx := context.Background()
	var left []string
	for _, k := range e.keys() {
		// The grant's tombstone (":x:") lasts until its call's deadline, at
		// most 10 s: a late copy of the acquire must grant nothing.
		if !e.fenceOnly(k) {
			left = append(left, k+" (pttl "+e.Redis.PTTL(ctx, k).Val().Round(time.Second).String()+")")
		}
	}
	sort.Strings(left)
	if len(left) > 0 {
		t.Errorf("the hold ran out, yet these keys of the lock remain: %v", left)
	}
}
