package handlers_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// enqueue queues a fair ticket on a held lock and returns the 202 response.
func (e *env) enqueue(name string, body map[string]any) *resp {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["fair"] = true
	r := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: body})
	wantStatus(e.t, r, http.StatusAccepted, "")
	return r
}

// poll long-polls a ticket URL.
func (e *env) poll(url string, waitMs int) *resp {
	e.t.Helper()
	return e.do(req{Method: "GET", Path: url + "?wait_ms=" + itoa(waitMs)})
}

// awaitWaiters blocks until this env holds n long-polls (the request is parked).
func (e *env) awaitWaiters(n float64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(e.Metrics.Waiters) != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("waiters %v, want %v", testutil.ToFloat64(e.Metrics.Waiters), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func parseStamp(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("timestamp %q: %v", s, err)
	}
	return ts
}

func TestTicketLifecycle(t *testing.T) { onBoth(t, testTicketLifecycle) }

func testTicketLifecycle(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	holder := e.acquire("tl", map[string]any{"ttl_ms": 30000})

	tk := e.enqueue("tl", map[string]any{"owner": "w1", "ttl_ms": 20000})
	if tk.Header.Get("Location") != tk.Str("url") || tk.Int("position") != 1 || tk.Int("ticket_ttl_ms") != 10000 {
		t.Fatalf("ticket %s, Location %q", tk.Raw, tk.Header.Get("Location"))
	}
	tk2 := e.enqueue("tl", nil)
	if tk2.Int("position") != 2 {
		t.Fatalf("second ticket position %d, want 2", tk2.Int("position"))
	}
	if st := e.do(req{Method: "GET", Path: "/v1/locks/tl"}); st.Int("waiters") != 2 {
		t.Fatalf("state waiters %d, want 2: %s", st.Int("waiters"), st.Raw)
	}

	// A poll that times out answers 202 with the current position; Prefer works too.
	r := e.do(req{Method: "GET", Path: tk.Str("url"), Header: map[string]string{"Prefer": "wait=1"}})
	wantStatus(t, r, http.StatusAccepted, "")
	if r.Header.Get("Preference-Applied") != "wait=1" || r.Int("position") != 1 {
		t.Fatalf("poll: Preference-Applied %q, %s", r.Header.Get("Preference-Applied"), r.Raw)
	}

	// Leaving the queue: 204, then 410; the next ticket moves up.
	wantStatus(t, e.do(req{Method: "DELETE", Path: tk2.Str("url")}), http.StatusNoContent, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: tk2.Str("url")}), http.StatusGone, "ticket-gone")
	wantStatus(t, e.poll(tk2.Str("url"), 0), http.StatusGone, "ticket-gone")

	// The holder releases while the ticket long-polls: 200 with its lease, handed
	// over by the release script.
	got := make(chan *resp, 1)
	go func() { got <- e.poll(tk.Str("url"), 10000) }()
	e.awaitWaiters(1)
	rel := e.do(req{Method: "DELETE", Path: holder.Str("url")})
	sent := time.Now()
	if !rel.Bool("released") {
		t.Fatalf("release %s", rel.Raw)
	}
	l := <-got
	t.Logf("release to granted poll answer: %v", time.Since(sent))
	wantStatus(t, l, http.StatusOK, "")
	if l.Int("fence") <= holder.Int("fence") || l.Str("owner") != "w1" || l.Int("count") != 1 || l.Int("ttl_ms") < 19000 {
		t.Fatalf("granted lease %s after %s", l.Raw, holder.Raw)
	}
	// The lease works like any other, and the ticket is spent.
	wantStatus(t, e.do(req{Method: "GET", Path: l.Str("url")}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: l.Str("url")}), http.StatusOK, "")
	wantStatus(t, e.poll(tk.Str("url"), 0), http.StatusGone, "ticket-gone")
	e.onlyFences() // and the released lease's tombstone, until its acquire's deadline
}

func TestFairAcquireWaitsThenGetsLease(t *testing.T) { onBoth(t, testFairAcquireWaitsThenGetsLease) }

func testFairAcquireWaitsThenGetsLease(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	holder := e.acquire("fw", map[string]any{"ttl_ms": 30000})
	got := make(chan *resp, 1)
	go func() {
		got <- e.do(req{Method: "POST", Path: "/v1/locks/fw", Body: map[string]any{"fair": true, "wait_ms": 10000}})
	}()
	e.awaitWaiters(1)
	e.do(req{Method: "DELETE", Path: holder.Str("url")})
	r := <-got
	wantStatus(t, r, http.StatusCreated, "")
	if r.Header.Get("Location") != r.Str("url") || r.Int("fence") <= holder.Int("fence") {
		t.Fatalf("fair grant %s", r.Raw)
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: r.Str("url")}), http.StatusOK, "")

	// Not granted in time: 202 and a ticket that lives on.
	e.acquire("fw", map[string]any{"ttl_ms": 30000})
	r = e.do(req{Method: "POST", Path: "/v1/locks/fw", Body: map[string]any{"fair": true, "wait_ms": 200}})
	wantStatus(t, r, http.StatusAccepted, "")
	wantStatus(t, e.poll(r.Str("url"), 0), http.StatusAccepted, "")
}

// Release, force and expiry each hand the lock to the head ticket, and wake exactly
// that ticket's waiter: the others keep waiting.
func TestHandoffWakesOnlyTheHead(t *testing.T) { onBoth(t, testHandoffWakesOnlyTheHead) }

func testHandoffWakesOnlyTheHead(t *testing.T, cluster bool) {
	for _, how := range []string{"release", "force", "expiry"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, envOptions{Cluster: cluster})
			ttl := 30000
			if how == "expiry" {
				ttl = 2000 // outlives setting up the three polls
			}
			holder := e.acquire("h", map[string]any{"ttl_ms": ttl})
			var tickets []*resp
			for range 3 {
				tickets = append(tickets, e.enqueue("h", nil))
			}
			answers := make([]chan *resp, 3)
			for i, tk := range tickets {
				answers[i] = make(chan *resp, 1)
				go func() { answers[i] <- e.poll(tk.Str("url"), 20000) }()
			}
			e.awaitWaiters(3)
			switch how {
			case "release":
				e.do(req{Method: "DELETE", Path: holder.Str("url")})
			case "force":
				r := e.do(req{Method: "DELETE", Path: "/v1/locks/h?force=true"})
				if !r.Bool("released") {
					t.Fatalf("force %s", r.Raw)
				}
			}
			head := <-answers[0]
			wantStatus(t, head, http.StatusOK, "")
			if how == "expiry" {
				late := parseStamp(t, head.Str("acquired_at")).Sub(parseStamp(t, holder.Str("expires_at")))
				t.Logf("lease end to grant: %v", late)
				if late > promptly { // 50 ms by the contract: the benchmark measures it
					t.Errorf("granted %v after the lease ran out, want at once (within %v)", late, promptly)
				}
			}
			// The two others are still parked: no herd.
			e.awaitWaiters(2)
			select {
			case r := <-answers[1]:
				t.Fatalf("second waiter woke: %d %s", r.Status, r.Raw)
			case r := <-answers[2]:
				t.Fatalf("third waiter woke: %d %s", r.Status, r.Raw)
			default:
			}
			// Each release hands on to the next, in order, with growing fences.
			fence := head.Int("fence")
			prev := head
			for i := 1; i < 3; i++ {
				e.do(req{Method: "DELETE", Path: prev.Str("url")})
				r := <-answers[i]
				wantStatus(t, r, http.StatusOK, "")
				if r.Int("fence") <= fence {
					t.Fatalf("fence %d after %d", r.Int("fence"), fence)
				}
				fence, prev = r.Int("fence"), r
			}
		})
	}
}

// With a live ticket queued, nobody else gets the lock: not a non-fair request,
// not a new ticket, not even in the instant after a release.
func TestNobodyOvertakesTheQueue(t *testing.T) { onBoth(t, testNobodyOvertakesTheQueue) }

func testNobodyOvertakesTheQueue(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	holder := e.acquire("o", map[string]any{"ttl_ms": 30000})
	first := e.enqueue("o", nil) // not polling: the handoff keeps the grant for it
	e.do(req{Method: "DELETE", Path: holder.Str("url")})
	r := e.do(req{Method: "POST", Path: "/v1/locks/o", Body: map[string]any{}})
	wantStatus(t, r, http.StatusLocked, "lock-held")
	second := e.enqueue("o", nil)
	if second.Int("position") != 1 {
		// The first ticket holds the lock now (unclaimed), so the second is next.
		t.Fatalf("second ticket position %d, want 1", second.Int("position"))
	}
	l := e.poll(first.Str("url"), 0)
	wantStatus(t, l, http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/o", Body: map[string]any{"wait_ms": 100}}), http.StatusLocked, "lock-held")
	e.do(req{Method: "DELETE", Path: l.Str("url")})
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/o", Body: map[string]any{}}), http.StatusLocked, "lock-held")
	wantStatus(t, e.poll(second.Str("url"), 0), http.StatusOK, "")
}

// A grant made to a ticket whose owner is not polling is kept for it for the ticket
// ttl: a late poll inside that window gets the lease at once, with its full ttl.
func TestLatePollClaimsGrant(t *testing.T) { onBoth(t, testLatePollClaimsGrant) }

func testLatePollClaimsGrant(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: 3 * time.Second})
	holder := e.acquire("late", map[string]any{"ttl_ms": 30000})
	tk := e.enqueue("late", map[string]any{"ttl_ms": 20000})
	e.do(req{Method: "DELETE", Path: holder.Str("url")})
	st := e.do(req{Method: "GET", Path: "/v1/locks/late"})
	if !st.Bool("held") || st.Int("ttl_ms") > 3000 {
		t.Fatalf("while unclaimed the lock is held for the ticket ttl: %s", st.Raw)
	}
	l := e.poll(tk.Str("url"), 0)
	wantStatus(t, l, http.StatusOK, "")
	if l.Int("ttl_ms") < 19000 {
		t.Fatalf("claimed lease ttl_ms %d, want the requested 20000", l.Int("ttl_ms"))
	}
	// Polling again is harmless and answers the same lease.
	again := e.poll(tk.Str("url"), 0)
	wantStatus(t, again, http.StatusOK, "")
	if again.Str("lease") != l.Str("lease") || again.Int("fence") != l.Int("fence") {
		t.Fatalf("second poll %s, first %s", again.Raw, l.Raw)
	}
}

// A dead ticket at the head delays the live one behind it by at most the ticket ttl.
func TestDeadTicketDoesNotStallQueue(t *testing.T) { onBoth(t, testDeadTicketDoesNotStallQueue) }

func testDeadTicketDoesNotStallQueue(t *testing.T, cluster bool) {
	const ticketTTL = 600 * time.Millisecond
	e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: ticketTTL})
	holder := e.acquire("dead", map[string]any{"ttl_ms": 30000})
	e.enqueue("dead", map[string]any{"owner": "dead"}) // never polled again
	live := e.enqueue("dead", map[string]any{"owner": "live"})
	got := make(chan *resp, 1)
	go func() { got <- e.poll(live.Str("url"), 15000) }()
	e.awaitWaiters(1)
	e.do(req{Method: "DELETE", Path: holder.Str("url")})
	released := time.Now()
	l := <-got
	wantStatus(t, l, http.StatusOK, "")
	delay := time.Since(released)
	t.Logf("live ticket granted %v after the release (ticket ttl %v)", delay, ticketTTL)
	if delay > ticketTTL+promptly {
		t.Fatalf("dead head held the queue %v, want at most the ticket ttl %v (+%v)", delay, ticketTTL, promptly)
	}
	if l.Str("owner") != "live" {
		t.Fatalf("granted %s", l.Raw)
	}
}

// A ticket nobody polls expires ticket_ttl after its creation or last poll.
func TestUnpolledTicketExpires(t *testing.T) { onBoth(t, testUnpolledTicketExpires) }

func testUnpolledTicketExpires(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: 300 * time.Millisecond})
	e.acquire("exp", map[string]any{"ttl_ms": 30000})
	tk := e.enqueue("exp", nil)
	wantStatus(t, e.poll(tk.Str("url"), 200), http.StatusAccepted, "") // alive while polled
	wantStatus(t, e.poll(tk.Str("url"), 0), http.StatusAccepted, "")
	// Each poll would keep it alive, so watch Redis for the key to go.
	deadline := time.Now().Add(5 * time.Second)
	for e.Redis.Exists(t.Context(), e.Prefix+":{exp}:t:"+idHash(tk.Str("ticket"))).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("ticket key never expired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantStatus(t, e.poll(tk.Str("url"), 0), http.StatusGone, "ticket-gone")
	if st := e.do(req{Method: "GET", Path: "/v1/locks/exp"}); st.Int("waiters") != 0 {
		t.Fatalf("dead ticket still counted: %s", st.Raw)
	}
}

// Cancelling a ticket that was handed the lock but has not claimed it passes the
// lock on at once.
func TestCancelUnclaimedGrantPassesOn(t *testing.T) { onBoth(t, testCancelUnclaimedGrantPassesOn) }

func testCancelUnclaimedGrantPassesOn(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	holder := e.acquire("cx", map[string]any{"ttl_ms": 30000})
	first := e.enqueue("cx", nil)
	second := e.enqueue("cx", nil)
	e.do(req{Method: "DELETE", Path: holder.Str("url")}) // handed to first, unclaimed
	wantStatus(t, e.do(req{Method: "DELETE", Path: first.Str("url")}), http.StatusNoContent, "")
	l := e.poll(second.Str("url"), 0)
	wantStatus(t, l, http.StatusOK, "")
}

// idHash is what Redis keeps in place of a lease, ticket or session id.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}
