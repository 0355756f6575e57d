package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Tests of shared holds (API.md, "Shared holds: read-write locks and
// semaphores"): shared holds coexist up to a limit, an exclusive hold excludes
// every other, each shared hold is a lease of its own, the queue stays FIFO
// across modes and a run of shared tickets at its head is granted together.

// share asks for a shared hold and returns the answer.
func (e *env) share(name string, body map[string]any) *resp {
	e.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	body["shared"] = true
	return e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: body})
}

// state is the lock's state.
func (e *env) state(name string) *resp {
	e.t.Helper()
	r := e.do(req{Method: "GET", Path: "/v1/locks/" + name})
	wantStatus(e.t, r, http.StatusOK, "")
	return r
}

// release releases one hold of a lease (by its response) and wants 200.
func (e *env) release(l *resp) *resp {
	e.t.Helper()
	r := e.do(req{Method: "DELETE", Path: l.Str("url")})
	wantStatus(e.t, r, http.StatusOK, "")
	return r
}

// onlyFences fails if anything of the env's prefix is left but locks' keys
// that keep only their fence.
func (e *env) onlyFences() {
	e.t.Helper()
	for _, k := range e.keys() {
		if !e.fenceOnly(k) {
			e.t.Errorf("key %s left behind: %v", k, e.Redis.Dump(context.Background(), k).Val())
		}
	}
}

// fenceOnly reports whether k is a lock's key that keeps only its fence (and
// its own bookkeeping): no hold, no queue.
func (e *env) fenceOnly(k string) bool { return fenceOnly(e.Redis, k) }

func fenceOnly(rdb redis.UniversalClient, k string) bool {
	return strings.HasSuffix(k, "}") && liveHolds(rdb, k) == 0
}

// liveHolds is how many holds the lock k records whose deadline has not passed
// (expiry runs no script: a hold that ran out stays recorded, dead, until the
// lock's next script or the key's own expiry).
func liveHolds(rdb redis.UniversalClient, k string) int {
	ctx := context.Background()
	now := rdb.Time(ctx).Val().UnixMilli()
	n := 0
	if lv, ok := readLock(rdb, k); ok && lv.x != nil {
		if d, _ := strconv.ParseInt(lv.x["deadline"], 10, 64); d >= now {
			n++
		}
	}
	for _, v := range rdb.HGetAll(ctx, k+":h").Val() {
		if d, _ := strconv.ParseInt(holdRecord(v)["deadline"], 10, 64); d >= now {
			n++
		}
	}
	return n
}

// lockValue is a lock's key read apart (lua/lib.lua): 'f|w|qe|n|l|m|sx|x'.
type lockValue struct {
	parts []string          // the eight parts, as stored
	x     map[string]string // the exclusive hold's record, or nil
}

func (v lockValue) fence() string { return v.parts[0] }

// readLock reads the lock's key k; ok is false when there is none.
func readLock(rdb redis.UniversalClient, k string) (lockValue, bool) {
	s, err := rdb.Get(context.Background(), k).Result()
	if err != nil {
		return lockValue{}, false
	}
	return parseLock(s), true
}

func parseLock(s string) lockValue {
	v := lockValue{parts: strings.SplitN(s, "|", 8)}
	for len(v.parts) < 8 {
		v.parts = append(v.parts, "")
	}
	if v.parts[7] != "" {
		v.x = holdRecord(v.parts[7])
	}
	return v
}

func TestSharedHoldsCoexist(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.share("rw", map[string]any{"owner": "reader-a", "ttl_ms": 30000})
	wantStatus(t, a, http.StatusCreated, "")
	b := e.share("rw", map[string]any{"owner": "reader-b", "ttl_ms": 20000})
	wantStatus(t, b, http.StatusCreated, "")
	if !a.Bool("shared") || b.Int("fence") <= a.Int("fence") || a.Str("lease") == b.Str("lease") {
		t.Fatalf("shared leases %s and %s: want shared, each its own lease and a higher fence", a.Raw, b.Raw)
	}
	if v, ok := a.Body["limit"]; !ok || v != nil {
		t.Errorf("a shared hold without a limit: limit %v (present %v), want null", v, ok)
	}

	// A writer is refused while readers hold, with the soonest-ending reader's time.
	w := e.do(req{Method: "POST", Path: "/v1/locks/rw", Body: map[string]any{"owner": "writer"}})
	wantStatus(t, w, http.StatusLocked, "lock-held")
	if w.Str("owner") != "reader-b" || w.Int("ttl_ms") > 20000 || w.Int("ttl_ms") < 15000 {
		t.Errorf("423 %s: want the soonest-ending hold (reader-b, about 20 s)", w.Raw)
	}

	st := e.state("rw")
	if st.Str("mode") != "shared" || st.Int("holders") != 2 || !st.Bool("held") || st.Body["limit"] != nil {
		t.Errorf("state %s: want shared, 2 holders, no limit", st.Raw)
	}
	if st.Int("fence") != b.Int("fence") || st.Str("owner") != "reader-b" || st.Int("ttl_ms") < 25000 {
		t.Errorf("state %s: want the highest fence (b's) with its owner, and the longest ttl (a's)", st.Raw)
	}
	holds, _ := st.Body["holds"].([]any)
	if len(holds) != 2 {
		t.Fatalf("state holds %v, want 2", st.Body["holds"])
	}
	if first := holds[0].(map[string]any); first["owner"] != "reader-b" || first["shared"] != true {
		t.Errorf("holds[0] %v: want the soonest to end first (reader-b)", first)
	}

	// Readers release one by one; then the writer gets it, and readers wait.
	if r := e.release(a); !r.Bool("released") || r.Int("count") != 0 {
		t.Errorf("release a: %s", r.Raw)
	}
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/rw", Body: map[string]any{}}), http.StatusLocked, "lock-held")
	e.release(b)
	x := e.acquire("rw", map[string]any{"owner": "writer"})
	if x.Bool("shared") || x.Body["limit"] != nil {
		t.Errorf("exclusive lease %s: want shared false and no limit", x.Raw)
	}
	if _, ok := x.Body["limit"]; ok {
		t.Errorf("exclusive lease %s carries limit", x.Raw)
	}
	wantStatus(t, e.share("rw", nil), http.StatusLocked, "lock-held")
	st = e.state("rw")
	if st.Str("mode") != "exclusive" || st.Int("holders") != 1 || st.Int("fence") != x.Int("fence") {
		t.Errorf("state %s: want exclusive, 1 holder, the writer's fence", st.Raw)
	}
	e.release(x)
	if st := e.state("rw"); st.Str("mode") != "free" || st.Int("holders") != 0 || len(st.Body["holds"].([]any)) != 0 {
		t.Errorf("state %s: want free with no holds", st.Raw)
	}
	e.onlyFences()
}

func TestSemaphoreLimit(t *testing.T) {
	e := newEnv(t, envOptions{})
	var leases []*resp
	for i := range 3 {
		r := e.share("sem", map[string]any{"limit": 3, "owner": "p" + itoa(i)})
		wantStatus(t, r, http.StatusCreated, "")
		if r.Int("limit") != 3 {
			t.Errorf("lease %s: want limit 3", r.Raw)
		}
		leases = append(leases, r)
	}
	full := e.share("sem", map[string]any{"limit": 3})
	wantStatus(t, full, http.StatusLocked, "lock-held")
	if ra := full.Header.Get("Retry-After"); ra == "" {
		t.Error("423 without Retry-After")
	}
	st := e.state("sem")
	if st.Int("limit") != 3 || st.Int("holders") != 3 {
		t.Errorf("state %s: want limit 3, 3 holders", st.Raw)
	}

	// Every holder must agree on the limit: a number against another, or none.
	for _, body := range []map[string]any{{"limit": 2}, {}} {
		r := e.share("sem", body)
		wantStatus(t, r, http.StatusConflict, "limit-mismatch")
		if r.Int("limit") != 3 {
			t.Errorf("409 %s: want the lock's limit 3", r.Raw)
		}
	}
	// An exclusive request is not a mismatch: it waits for no holds at all.
	wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/sem", Body: map[string]any{}}), http.StatusLocked, "lock-held")

	// A slot frees: the next permit fits.
	e.release(leases[0])
	wantStatus(t, e.share("sem", map[string]any{"limit": 3}), http.StatusCreated, "")

	// Against none: a lock whose shared holds have no limit refuses a limit.
	e.share("open", nil)
	r := e.share("open", map[string]any{"limit": 5})
	wantStatus(t, r, http.StatusConflict, "limit-mismatch")
	if v, ok := r.Body["limit"]; !ok || v != nil {
		t.Errorf("409 %s: want limit null", r.Raw)
	}

	// Once every shared hold is gone, the next first shared hold sets a new limit.
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/sem?force=true"}), http.StatusOK, "")
	wantStatus(t, e.share("sem", map[string]any{"limit": 1}), http.StatusCreated, "")
	wantStatus(t, e.share("sem", map[string]any{"limit": 1}), http.StatusLocked, "lock-held")
}

func TestSharedLeaseLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.share("life", map[string]any{"ttl_ms": 10000, "limit": 2})
	b := e.share("life", map[string]any{"ttl_ms": 10000, "limit": 2})

	// Re-entry keeps the hold's fence and mode, renews it, counts.
	r := e.do(req{Method: "POST", Path: "/v1/locks/life", Body: map[string]any{"lease": a.Str("lease"), "ttl_ms": 60000}})
	wantStatus(t, r, http.StatusOK, "")
	if r.Int("count") != 2 || r.Int("fence") != a.Int("fence") || !r.Bool("shared") || r.Int("ttl_ms") < 55000 {
		t.Errorf("re-entry %s: want count 2, a's fence, shared, ttl 60 s", r.Raw)
	}
	r = e.do(req{Method: "POST", Path: "/v1/locks/life", Body: map[string]any{"lease": a.Str("lease"), "shared": true}})
	wantStatus(t, r, http.StatusOK, "") // naming the same mode is fine
	// Naming the other mode is a 400: there is no upgrade.
	r = e.do(req{Method: "POST", Path: "/v1/locks/life", Body: map[string]any{"lease": a.Str("lease"), "shared": false}})
	wantStatus(t, r, http.StatusBadRequest, "invalid-request")
	if errs, _ := r.Body["errors"].(map[string]any); errs["shared"] == nil {
		t.Errorf("400 %s: want errors.shared", r.Raw)
	}

	// Renewal and GET work on each hold alone.
	p := e.do(req{Method: "PATCH", Path: b.Str("url"), Body: map[string]any{"ttl_ms": 500}})
	wantStatus(t, p, http.StatusOK, "")
	if p.Int("ttl_ms") > 500 || !p.Bool("shared") || p.Int("limit") != 2 {
		t.Errorf("renew %s: want ttl 500, shared, limit 2", p.Raw)
	}
	g := e.do(req{Method: "GET", Path: a.Str("url")})
	wantStatus(t, g, http.StatusOK, "")
	if g.Int("count") != 3 {
		t.Errorf("GET lease %s: want count 3", g.Raw)
	}

	// b runs out on its own; a lives on; b's lease is then unknown everywhere.
	deadline := time.Now().Add(5 * time.Second)
	for e.state("life").Int("holders") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("b's 500 ms shared hold did not run out")
		}
		time.Sleep(20 * time.Millisecond) // time itself is the event
	}
	for _, rq := range []req{
		{Method: "GET", Path: b.Str("url")},
		{Method: "PATCH", Path: b.Str("url"), Body: map[string]any{"ttl_ms": 10000}},
		{Method: "DELETE", Path: b.Str("url")},
		{Method: "POST", Path: "/v1/locks/life", Body: map[string]any{"lease": b.Str("lease")}},
	} {
		wantStatus(t, e.do(rq), http.StatusNotFound, "lease-not-held")
	}
	for i := 3; i > 0; i-- {
		if r := e.release(a); r.Int("count") != int64(i-1) || r.Bool("released") != (i == 1) {
			t.Errorf("release %d: %s", i, r.Raw)
		}
	}
	wantStatus(t, e.do(req{Method: "DELETE", Path: a.Str("url")}), http.StatusNotFound, "lease-not-held")
	e.onlyFences()
}

func TestSharedRequestValidation(t *testing.T) {
	e := newEnv(t, envOptions{})
	held := e.share("v", nil)
	tests := []struct {
		give  map[string]any
		field string
	}{
		{give: map[string]any{"limit": 2}, field: "limit"},
		{give: map[string]any{"shared": false, "limit": 2}, field: "limit"},
		{give: map[string]any{"shared": true, "limit": 0}, field: "limit"},
		{give: map[string]any{"shared": true, "limit": -1}, field: "limit"},
		{give: map[string]any{"shared": true, "limit": 1000000001}, field: "limit"},
		{give: map[string]any{"shared": true, "limit": 1.5}, field: "limit"},
		{give: map[string]any{"shared": "yes"}, field: "shared"},
		{give: map[string]any{"shared": true, "limit": 2, "lease": held.Str("lease")}, field: "limit"},
	}
	for _, tt := range tests {
		before := e.snapshot()
		r := e.do(req{Method: "POST", Path: "/v1/locks/v", Body: tt.give})
		wantStatus(t, r, http.StatusBadRequest, "invalid-request")
		if errs, _ := r.Body["errors"].(map[string]any); errs[tt.field] == nil {
			t.Errorf("%v: %s, want errors.%s", tt.give, r.Raw, tt.field)
		}
		e.unchanged("bad shared request", before, e.snapshot())
	}
}

func TestForceEndsEveryHold(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.share("f", map[string]any{"limit": 2})
	b := e.share("f", map[string]any{"limit": 2})
	x := e.enqueue("f", map[string]any{"owner": "writer"})
	r := e.do(req{Method: "DELETE", Path: "/v1/locks/f?force=true"})
	wantStatus(t, r, http.StatusOK, "")
	if !r.Bool("released") {
		t.Errorf("force %s: want released", r.Raw)
	}
	for _, l := range []*resp{a, b} {
		wantStatus(t, e.do(req{Method: "GET", Path: l.Str("url")}), http.StatusNotFound, "lease-not-held")
	}
	got := e.poll(x.Str("url"), 2000)
	wantStatus(t, got, http.StatusOK, "") // handed to the queue
	if got.Bool("shared") || got.Str("owner") != "writer" {
		t.Errorf("poll %s: want the writer's exclusive lease", got.Raw)
	}
}

// A run of shared tickets at the head is granted together, each woken at once;
// an exclusive ticket stops the run; FIFO across modes.
func TestSharedTicketRun(t *testing.T) {
	e := newEnv(t, envOptions{})
	x0 := e.acquire("run", map[string]any{"owner": "x0"})
	var tickets []*resp
	for _, o := range []struct {
		owner  string
		shared bool
	}{{"s1", true}, {"s2", true}, {"s3", true}, {"x4", false}, {"s5", true}} {
		tickets = append(tickets, e.enqueue("run", map[string]any{"owner": o.owner, "shared": o.shared, "ttl_ms": 30000}))
	}
	// The first three wait in long-polls; the release wakes each at once.
	var polls []<-chan answer
	for _, tk := range tickets[:3] {
		polls = append(polls, e.send(req{Method: "GET", Path: tk.Str("url") + "?wait_ms=15000"}))
	}
	e.awaitWaiters(3)
	released := time.Now()
	e.release(x0)
	var run []*resp
	for i, ch := range polls {
		got := awaitAnswer(t, ch, 20*time.Second)
		wantStatus(t, got.r, http.StatusOK, "")
		if got.r.Str("owner") != "s"+itoa(i+1) || !got.r.Bool("shared") {
			t.Errorf("run %d: %s", i, got.r.Raw)
		}
		if d := got.at.Sub(released); d > promptly {
			t.Errorf("ticket s%d answered %v after the release, want at once", i+1, d)
		}
		run = append(run, got.r)
	}
	// The exclusive ticket stops the run: it and the shared one behind it wait.
	if p := e.poll(tickets[3].Str("url"), 0); p.Status != http.StatusAccepted || p.Int("position") != 1 {
		t.Errorf("x4: %d %s, want 202 at position 1", p.Status, p.Raw)
	}
	if p := e.poll(tickets[4].Str("url"), 0); p.Status != http.StatusAccepted || p.Int("position") != 2 {
		t.Errorf("s5: %d %s, want 202 at position 2", p.Status, p.Raw)
	}
	// A new shared request would fit but must not overtake the queue.
	wantStatus(t, e.share("run", nil), http.StatusLocked, "lock-held")
	if st := e.state("run"); st.Int("holders") != 3 || st.Int("waiters") != 2 {
		t.Errorf("state %s: want 3 holders and 2 waiters", st.Raw)
	}
	for _, l := range run {
		e.release(l)
	}
	x4 := e.poll(tickets[3].Str("url"), 10000)
	wantStatus(t, x4, http.StatusOK, "")
	if x4.Bool("shared") || x4.Int("fence") <= run[2].Int("fence") {
		t.Errorf("x4 %s: want exclusive with a fence above the run's", x4.Raw)
	}
	if p := e.poll(tickets[4].Str("url"), 0); p.Status != http.StatusAccepted {
		t.Errorf("s5 while x4 holds: %d %s, want 202", p.Status, p.Raw)
	}
	e.release(x4)
	s5 := e.poll(tickets[4].Str("url"), 10000)
	wantStatus(t, s5, http.StatusOK, "")
	e.release(s5)
	e.onlyFences()
}

// A shared hold's expiry hands its slot to the queue at once (within 50 ms, as
// the benchmark measures; here within promptly, not at the wait's end), and the
// last one's expiry hands the lock to a queued exclusive waiter.
func TestSharedExpiryHandsSlotOn(t *testing.T) {
	e := newEnv(t, envOptions{})
	short := e.share("slot", map[string]any{"limit": 2, "ttl_ms": 2000})
	long := e.share("slot", map[string]any{"limit": 2, "ttl_ms": 30000})
	tk := e.enqueue("slot", map[string]any{"shared": true, "limit": 2, "owner": "next"})
	got := e.poll(tk.Str("url"), 15000)
	wantStatus(t, got, http.StatusOK, "")
	late := parseStamp(t, got.Str("acquired_at")).Sub(parseStamp(t, short.Str("expires_at")))
	t.Logf("shared hold end -> slot granted: %s", fmtMs(late))
	if late < 0 || late > promptly {
		t.Errorf("slot granted %v after the shared hold ran out, want at once (within %v)", late, promptly)
	}
	e.release(long)

	// The exclusive waiter gets the lock when the last shared hold runs out.
	p := e.do(req{Method: "PATCH", Path: got.Str("url"), Body: map[string]any{"ttl_ms": 2000}})
	wantStatus(t, p, http.StatusOK, "")
	x := e.parkWaiter("slot", map[string]any{"wait_ms": 15000, "owner": "writer"})
	xg := awaitAnswer(t, x, 20*time.Second)
	wantStatus(t, xg.r, http.StatusCreated, "")
	late = parseStamp(t, xg.r.Str("acquired_at")).Sub(parseStamp(t, p.Str("expires_at")))
	t.Logf("last shared hold end -> exclusive waiter granted: %s", fmtMs(late))
	if late < 0 || late > promptly {
		t.Errorf("exclusive waiter granted %v after the last shared hold ran out, want at once (within %v)", late, promptly)
	}
}

// Non-fair shared waiters: an exclusive release lets every one of them in.
func TestSharedWaitersAllGetIn(t *testing.T) {
	e := newEnv(t, envOptions{})
	x := e.acquire("many", map[string]any{})
	var ws []<-chan answer
	for i := range 4 {
		ws = append(ws, e.send(req{Method: "POST", Path: "/v1/locks/many",
			Body: map[string]any{"shared": true, "wait_ms": 15000, "owner": "r" + itoa(i)}}))
	}
	e.awaitWaiters(4)
	e.release(x)
	for _, ch := range ws {
		got := awaitAnswer(t, ch, promptly) // at the release, not at the wait's end
		wantStatus(t, got.r, http.StatusCreated, "")
	}
	if st := e.state("many"); st.Int("holders") != 4 {
		t.Errorf("state %s: want 4 shared holders", st.Raw)
	}
}

// A watch on a shared lock returns on any change of its holds.
func TestWatchSharedChanges(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.share("ws", map[string]any{"ttl_ms": 30000})
	for _, step := range []struct {
		give   string
		change func() *resp
	}{
		{give: "a second reader", change: func() *resp { return e.share("ws", map[string]any{"ttl_ms": 30000}) }},
		{give: "a reader leaves", change: func() *resp { return e.release(a) }},
	} {
		w := e.send(req{Method: "GET", Path: "/v1/locks/ws?wait_ms=15000"})
		e.awaitWaiters(1)
		e.awaitSubscribers("ws", 1)
		step.change()
		got := awaitAnswer(t, w, promptly) // at the change, not at the wait's end
		wantStatus(t, got.r, http.StatusOK, "")
		e.awaitWaiters(0)
	}
}
