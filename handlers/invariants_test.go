package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestInvariantsRandomised drives long random sequences of every lock and ticket
// operation over three lock names on two gateways sharing a prefix, with short
// leases and tickets so that expiry happens all the time, and after every step
// checks Redis itself against a model of who holds what:
//   - at most one holder per lock, the one the model expects, and GET lease agrees;
//   - grants follow arrival order among live tickets, and no acquire overtakes a
//     live ticket;
//   - fences strictly increase per name;
//   - after GET /v1/locks/{name}, the head of the queue is a live ticket;
//   - at the end, nothing is left in Redis but the fence keys.
//
// Expiry happens on the Redis clock while the test runs on the local one (the same
// host clock): an outcome that depends on whether something had expired when the
// script ran is checked only when the send and receive times of the request decide
// it, and either outcome is accepted in the few milliseconds between.
//
// BATON_INVARIANTS_SEED replays a sequence of choices (timing may still differ);
// BATON_INVARIANTS_STEPS changes the number of steps.
func TestInvariantsRandomised(t *testing.T) { onBoth(t, testInvariantsRandomised) }

func testInvariantsRandomised(t *testing.T, cluster bool) {
	seed := uint64(20250101)
	if s := os.Getenv("BATON_INVARIANTS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BATON_INVARIANTS_SEED %q: %v", s, err)
		}
		seed = n
	}
	steps := 3000
	if s := os.Getenv("BATON_INVARIANTS_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("BATON_INVARIANTS_STEPS %q: %v", s, err)
		}
		steps = n
	}
	t.Logf("seed %d (BATON_INVARIANTS_SEED=%d replays it), %d steps", seed, seed, steps)

	e1 := newEnv(t, envOptions{Cluster: cluster, TicketTTL: invTicketTTL})
	e2 := newEnv(t, envOptions{Cluster: cluster, TicketTTL: invTicketTTL, Prefix: e1.Prefix})
	v := &invRun{invDriver: newInvDriver(t, seed, 0x9e3779b97f4a7c15, e1, e2), violations: map[string]int{}}
	for _, n := range []string{"alpha", "bravo", "charlie"} {
		v.locks = append(v.locks, &invLock{name: n, dead: map[string]int64{}})
	}

	budget := time.Now().Add(20 * time.Second)
	for v.step = 1; v.step <= steps; v.step++ {
		if time.Now().After(budget) {
			t.Logf("time budget spent after %d steps", v.step-1)
			break
		}
		L := v.locks[v.rng.IntN(len(v.locks))]
		v.randomStep(L)
		// GET lease agrees with the model's holder while it cannot have expired.
		if h := L.holder; h != nil && h.known && h.exp > time.Now().UnixMilli()+50 {
			v.leaseGet(L, h)
		}
	}
	v.drain()
	t.Logf("outcomes: %v", v.outcomes)
	for kind, n := range v.violations {
		t.Logf("violation %q seen %d times", kind, n)
	}
}

// TestInvariantsQueueHeadPruned is the randomised test's pruning invariant in two
// fixed sequences: after GET /v1/locks/{name}, the head of the queue is a live
// ticket, `waiters` counts live tickets only, and the ticket behind no live one
// is at position 1.
func TestInvariantsQueueHeadPruned(t *testing.T) { onBoth(t, testInvariantsQueueHeadPruned) }

func testInvariantsQueueHeadPruned(t *testing.T, cluster bool) {
	ctx := context.Background()
	// keepUntilGone polls keep until the ticket gone runs out (time must pass:
	// expiry is the event).
	keepUntilGone := func(t *testing.T, e *env, keep, gone *resp) {
		t.Helper()
		key := e.Prefix + ":{" + keep.Str("name") + "}:t:" + invHash(gone.Str("ticket"))
		deadline := time.Now().Add(10 * time.Second)
		for e.Redis.Exists(ctx, key).Val() == 1 {
			if time.Now().After(deadline) {
				t.Fatal("the ticket did not run out")
			}
			wantStatus(t, e.do(req{Method: "GET", Path: keep.Str("url")}), http.StatusAccepted, "")
			time.Sleep(50 * time.Millisecond)
		}
	}
	enqueue := func(t *testing.T, e *env, name string) *resp {
		t.Helper()
		r := e.do(req{Method: "POST", Path: "/v1/locks/" + name, Body: map[string]any{"fair": true}})
		wantStatus(t, r, http.StatusAccepted, "")
		return r
	}
	// checkHead checks the queue after a GET of the lock's state.
	checkHead := func(t *testing.T, e *env, name string, st *resp, live int) {
		t.Helper()
		lock := e.Prefix + ":{" + name + "}"
		if head := e.Redis.ZRange(ctx, lock+":q", 0, 0).Val(); len(head) == 1 && e.Redis.Exists(ctx, lock+":t:"+head[0]).Val() != 1 {
			t.Errorf("after GET, the head of the queue (of %d entries) is a ticket whose key is gone; want a live ticket",
				e.Redis.ZCard(ctx, lock+":q").Val())
		}
		if got := st.Int("waiters"); got != int64(live) {
			t.Errorf("GET state: waiters %d, want %d (the live tickets)", got, live)
		}
	}

	t.Run("held", func(t *testing.T) {
		// The head ticket runs out while the one behind it is kept alive (its
		// ttl far longer than the keeping polls' pace, however loaded the machine).
		e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: 2 * time.Second})
		e.acquire("held", map[string]any{"ttl_ms": 30000})
		first, second := enqueue(t, e, "held"), enqueue(t, e, "held")
		keepUntilGone(t, e, second, first)
		st := e.do(req{Method: "GET", Path: "/v1/locks/held"})
		checkHead(t, e, "held", st, 1)
		if got := e.do(req{Method: "GET", Path: second.Str("url")}).Int("position"); got != 1 {
			t.Errorf("the live ticket's position %d, want 1: nobody live is ahead of it", got)
		}
	})

	t.Run("after handoff", func(t *testing.T) {
		// The second ticket runs out while the first is kept alive; then the lease
		// runs out, and GET hands the lock to the first: the dead second is the
		// new head. The lease ends half a ticket ttl after the second ticket, and
		// as long before the first, which nothing polls meanwhile, would.
		e := newEnv(t, envOptions{Cluster: cluster, TicketTTL: 3 * time.Second})
		e.acquire("handoff", map[string]any{"ttl_ms": 4500})
		first, second := enqueue(t, e, "handoff"), enqueue(t, e, "handoff")
		keepUntilGone(t, e, first, second)
		lock := e.Prefix + ":{handoff}"
		deadline := time.Now().Add(10 * time.Second)
		for liveHolds(e.Redis, lock) > 0 { // the lease runs out; nothing hands it on yet
			if time.Now().After(deadline) {
				t.Fatal("the lease did not run out")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if e.Redis.Exists(ctx, lock+":t:"+invHash(first.Str("ticket"))).Val() != 1 {
			t.Fatal("the first ticket ran out too; the test's polls came too late")
		}
		st := e.do(req{Method: "GET", Path: "/v1/locks/handoff"})
		if !st.Bool("held") {
			t.Fatalf("GET state %s: want the lock handed to the first ticket", st.Raw)
		}
		checkHead(t, e, "handoff", st, 0)
	})
}

const (
	invTicketTTL = 300 * time.Millisecond
	// invSlack is the milliseconds of rounding allowed between the local clock
	// and Redis's (both the host's clock, read in whole milliseconds).
	invSlack = 3
)

// invTri is whether something (a lease, a ticket) was alive when a request's script
// ran, as far as the request's send and receive times tell.
type invTri int

const (
	invNo invTri = iota
	invMaybe
	invYes
)

// invWindow is when a request was sent and answered, in Unix ms.
type invWindow struct{ sent, recv int64 }

// alive classifies a key that Redis keeps while its time is at most exp.
func (w invWindow) alive(exp int64) invTri {
	switch {
	case exp >= w.recv+invSlack:
		return invYes
	case exp < w.sent-invSlack:
		return invNo
	default:
		return invMaybe
	}
}

type invLease struct {
	id, lh    string
	owner     string
	fence     int64
	count     int
	ttl       int64 // ms of the last grant, renewal or re-entry: a renewal's default
	exp       int64 // Redis ms; the lease lives while Redis time <= exp
	ticket    *invTicket
	unclaimed bool // granted to a ticket whose owner has not polled since
	known     bool // the client has the lease id (a 201, or a 200 poll)
	confirmed bool // renewed, re-entered or handed out again and again since: a cancel of its ticket leaves it
	handed    int  // polls answered 200 with it (each one's answer is on the grant's list)
}

// invMaxHanded is how many answers a grant is handed to before the server counts
// it as its owner's, as a renewal would (lua/lib.lua MAX_HANDED): one more poll
// answered 200 confirms it.
const invMaxHanded = 4

// handOut notes a poll answered 200 with the grant.
func (h *invLease) handOut() {
	h.handed++
	if h.handed > invMaxHanded {
		h.confirmed = true
	}
}

type invTicket struct {
	id, th, lh string
	owner      string
	seq        int
	ttl        int64 // the lease ttl it asked for
	exp        int64 // Redis ms
}

type invLock struct {
	name      string
	holder    *invLease
	queue     []*invTicket // arrival order; those whose key existed at the last look
	lastFence int64
	stale     []string         // lease ids no longer held
	gone      []*invTicket     // tickets expired, cancelled or granted
	dead      map[string]int64 // gone tickets that may still sit in :q: hash -> expiry
	qexp      int64            // when :q runs out, Redis ms (-1: never, -2: absent)
}

func (L *invLock) path() string { return "/v1/locks/" + L.name }

func (L *invLock) key() string { return "{" + L.name + "}" }

// invDriver is what both drivers share: two gateways on one Redis, a seeded
// source of choices, the step count, the last steps (for a failure's message)
// and the tally of answers.
type invDriver struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	envs     []*env
	rdb      redis.UniversalClient
	prefix   string
	step     int
	seq      int
	hist     []string
	outcomes map[string]int
}

func newInvDriver(t *testing.T, seed, salt uint64, envs ...*env) invDriver {
	return invDriver{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^salt)), envs: envs,
		rdb: envs[0].Redis, prefix: envs[0].Prefix, outcomes: map[string]int{}}
}

// remember adds a line to the last steps kept for a failure's message.
func (d *invDriver) remember(lock, format string, args ...any) {
	d.hist = append(d.hist, fmt.Sprintf("%d %s: %s", d.step, lock, fmt.Sprintf(format, args...)))
	if len(d.hist) > 25 {
		d.hist = d.hist[1:]
	}
}

// lastSteps is the steps remembered, one a line.
func (d *invDriver) lastSteps() string { return strings.Join(d.hist, "\n  ") }

// gateway is one of the gateways, at random.
func (d *invDriver) gateway() *env { return d.envs[d.rng.IntN(len(d.envs))] }

type invRun struct {
	invDriver
	locks      []*invLock
	violations map[string]int
}

func invHash(id string) string { return idHash(id) }

// holdFields name a hold record's tab-separated fields (lua/lib.lua).
var holdFields = []string{"lease", "deadline", "count", "fence", "ttl", "at", "by", "told", "tk", "pc", "mk", "ik",
	"sd", "ss", "sm", "lim", "owner"}

// holdRecord reads a hold record (lua/lib.lua) into its fields by name.
func holdRecord(rec string) map[string]string {
	out := map[string]string{}
	for i, v := range strings.SplitN(rec, "\t", len(holdFields)) {
		out[holdFields[i]] = v
	}
	return out
}

// invTicketLease is the lease id a ticket is granted under (DESIGN.md).
func invTicketLease(ticket string) string {
	sum := sha256.Sum256([]byte("lease:" + ticket))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func invNow() int64 { return time.Now().UnixMilli() }

// fail stops the run: the model no longer describes Redis.
func (v *invRun) fail(L *invLock, format string, args ...any) {
	v.t.Helper()
	v.t.Fatalf("step %d, lock %s (seed %d): %s\nlast steps:\n  %s\nmodel: %s",
		v.step, L.name, v.seed, fmt.Sprintf(format, args...), v.lastSteps(), v.describe(L))
}

// violation reports an invariant broken without harm to the model, once per kind,
// and goes on.
func (v *invRun) violation(L *invLock, kind, format string, args ...any) {
	v.t.Helper()
	v.violations[kind]++
	if v.violations[kind] == 1 {
		v.t.Errorf("step %d, lock %s (seed %d): %s: %s\nlast steps:\n  %s", v.step, L.name, v.seed, kind,
			fmt.Sprintf(format, args...), v.lastSteps())
	}
}

func (v *invRun) describe(L *invLock) string {
	var b strings.Builder
	if h := L.holder; h != nil {
		fmt.Fprintf(&b, "holder fence %d count %d exp %+dms ticket %v unclaimed %v; ", h.fence, h.count,
			h.exp-invNow(), h.ticket != nil, h.unclaimed)
	} else {
		b.WriteString("free; ")
	}
	for _, tk := range L.queue {
		fmt.Fprintf(&b, "ticket #%d exp %+dms; ", tk.seq, tk.exp-invNow())
	}
	fmt.Fprintf(&b, "last fence %d", L.lastFence)
	return b.String()
}

func (v *invRun) note(L *invLock, format string, args ...any) {
	v.remember(L.name, format, args...)
}

// do sends a request through a random gateway and times it.
func (v *invRun) do(op string, r req) (*resp, invWindow) {
	v.t.Helper()
	e := v.gateway()
	w := invWindow{sent: invNow()}
	res := e.do(r)
	w.recv = invNow()
	v.outcomes[op+" "+strconv.Itoa(res.Status)]++
	return res, w
}

func (v *invRun) randomStep(L *invLock) {
	switch n := v.rng.IntN(100); {
	case n < 14:
		if len(L.queue) < 6 {
			v.acquire(L, true)
		} else {
			v.poll(L)
		}
	case n < 24:
		v.acquire(L, false)
	case n < 44:
		v.poll(L)
	case n < 50:
		v.cancel(L)
	case n < 61:
		v.release(L)
	case n < 68:
		v.renew(L)
	case n < 74:
		v.reenter(L)
	case n < 77:
		v.force(L)
	case n < 86:
		v.state(L)
	case n < 90:
		if h := L.holder; h != nil && h.known && v.rng.IntN(4) > 0 {
			v.leaseGet(L, h)
		} else if len(L.stale) > 0 {
			v.leaseGetStale(L)
		} else {
			v.state(L)
		}
	case n < 98:
		v.reenterStale(L)
	default:
		d := time.Duration(50+v.rng.IntN(300)) * time.Millisecond
		v.note(L, "sleep %v", d)
		time.Sleep(d) // time itself is the event: leases and tickets expire
	}
}

// liveTickets is the strongest claim the model can make about the queue when a
// script ran: invYes if some ticket surely lived, invMaybe if one might have.
func (L *invLock) liveTickets(w invWindow) invTri {
	best := invNo
	for _, tk := range L.queue {
		best = max(best, w.alive(tk.exp))
	}
	return best
}

func (L *invLock) holderAlive(w invWindow) invTri {
	if L.holder == nil {
		return invNo
	}
	return w.alive(L.holder.exp)
}

// acquire is a POST with wait 0: fair (a ticket when busy) or not (423 when busy).
func (v *invRun) acquire(L *invLock, fair bool) {
	v.seq++
	ttl := int64(100 + v.rng.IntN(201))
	owner := "o" + strconv.Itoa(v.seq)
	body := map[string]any{"ttl_ms": ttl, "owner": owner}
	if fair {
		body["fair"] = true
	}
	r, w := v.do(map[bool]string{true: "fair", false: "acquire"}[fair], req{Method: "POST", Path: L.path(), Body: body})
	v.note(L, "acquire fair=%v ttl %d: %d", fair, ttl, r.Status)
	busy := max(L.holderAlive(w), L.liveTickets(w))
	eff := invEffects{w: w}
	switch {
	case r.Status == http.StatusCreated:
		if busy == invYes {
			v.fail(L, "acquire granted (fence %d) while the lock was held or a live ticket was queued", r.Int("fence"))
		}
		if r.Int("fence") <= L.lastFence || r.Int("count") != 1 || r.Str("owner") != owner ||
			r.Int("ttl_ms") > ttl || r.Int("ttl_ms") < ttl-(w.recv-w.sent)-invSlack {
			v.fail(L, "granted lease %s, want a fence above %d, count 1, owner %s, ttl_ms about %d", r.Raw, L.lastFence, owner, ttl)
		}
		eff.granted = &invLease{id: r.Str("lease"), lh: invHash(r.Str("lease")), owner: owner, fence: r.Int("fence"),
			count: 1, ttl: ttl, known: true}
	case fair && r.Status == http.StatusAccepted:
		if busy == invNo {
			v.fail(L, "queued while the lock was free and nobody waited: %s", r.Raw)
		}
		if r.Int("ticket_ttl_ms") != invTicketTTL.Milliseconds() || r.Header.Get("Location") != r.Str("url") {
			v.fail(L, "ticket %s, Location %q", r.Raw, r.Header.Get("Location"))
		}
		id := r.Str("ticket")
		tk := &invTicket{id: id, th: invHash(id), lh: invHash(invTicketLease(id)), owner: owner, seq: v.seq, ttl: ttl}
		L.queue = append(L.queue, tk)
		eff.kept, eff.position = tk, int(r.Int("position"))
	case !fair && r.Status == http.StatusLocked:
		if busy == invNo {
			v.fail(L, "423 while the lock was free and nobody waited: %s", r.Raw)
		}
		if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
			v.fail(L, "423 Retry-After %q, want a whole number of seconds >= 1", r.Header.Get("Retry-After"))
		}
	default:
		v.fail(L, "acquire answered %d: %s", r.Status, r.Raw)
	}
	v.reconcile(L, eff)
}

// pickTicket is mostly a queued ticket, else the holder's or a gone one.
func (v *invRun) pickTicket(L *invLock) *invTicket {
	n := v.rng.IntN(10)
	switch {
	case n < 7 && len(L.queue) > 0:
		return L.queue[v.rng.IntN(len(L.queue))]
	case n < 9 && L.holder != nil && L.holder.ticket != nil:
		return L.holder.ticket
	case len(L.gone) > 0:
		return L.gone[v.rng.IntN(len(L.gone))]
	case len(L.queue) > 0:
		return L.queue[0]
	default:
		return nil
	}
}

func (v *invRun) poll(L *invLock) {
	tk := v.pickTicket(L)
	if tk == nil {
		v.acquire(L, true)
		return
	}
	r, w := v.do("poll", req{Method: "GET", Path: L.path() + "/tickets/" + tk.id + "?wait_ms=0"})
	v.note(L, "poll #%d: %d", tk.seq, r.Status)
	eff := invEffects{w: w}
	queued := slices.Contains(L.queue, tk)
	h := L.holder
	holding := h != nil && h.ticket == tk
	switch r.Status {
	case http.StatusOK:
		if r.Str("lease") != invTicketLease(tk.id) || r.Str("url") != L.path()+"/leases/"+r.Str("lease") || r.Str("owner") != tk.owner {
			v.fail(L, "poll #%d granted %s, want the ticket's derived lease and owner %s", tk.seq, r.Raw, tk.owner)
		}
		switch {
		case holding:
			if L.holderAlive(w) == invNo {
				v.fail(L, "poll #%d: 200 after its grant ran out", tk.seq)
			}
			if r.Int("fence") != h.fence || r.Int("count") != int64(h.count) {
				v.fail(L, "poll #%d: %s, want fence %d count %d", tk.seq, r.Raw, h.fence, h.count)
			}
			h.unclaimed, h.known = false, true
			h.handOut()
		case queued:
			if w.alive(tk.exp) == invNo || L.holderAlive(w) == invYes {
				v.fail(L, "poll #%d: granted a dead ticket or over a live holder: %s", tk.seq, r.Raw)
			}
			eff.claimed = tk
		default:
			v.fail(L, "poll #%d: 200 for a gone ticket: %s", tk.seq, r.Raw)
		}
	case http.StatusAccepted:
		if !queued || w.alive(tk.exp) == invNo {
			v.fail(L, "poll #%d: 202 for a ticket that is gone or granted: %s", tk.seq, r.Raw)
		}
		eff.kept, eff.position = tk, int(r.Int("position"))
	case http.StatusGone:
		wantStatus(v.t, r, http.StatusGone, "ticket-gone")
		if queued && w.alive(tk.exp) == invYes {
			v.fail(L, "poll #%d: 410 for a live ticket", tk.seq)
		}
		if holding && L.holderAlive(w) == invYes {
			v.fail(L, "poll #%d: 410 while its grant was held", tk.seq)
		}
	default:
		v.fail(L, "poll answered %d: %s", r.Status, r.Raw)
	}
	v.reconcile(L, eff)
}

func (v *invRun) cancel(L *invLock) {
	tk := v.pickTicket(L)
	if tk == nil {
		v.acquire(L, true)
		return
	}
	r, w := v.do("cancel", req{Method: "DELETE", Path: L.path() + "/tickets/" + tk.id})
	v.note(L, "cancel #%d: %d", tk.seq, r.Status)
	eff := invEffects{w: w}
	queued := slices.Contains(L.queue, tk)
	h := L.holder
	// A grant to the ticket goes with it unless its lease was renewed or
	// re-entered since (a poll's answer may never have arrived).
	unclaimedGrant := h != nil && h.ticket == tk && (h.unclaimed || !h.confirmed)
	switch r.Status {
	case http.StatusNoContent:
		switch {
		case queued:
			if w.alive(tk.exp) == invNo {
				v.fail(L, "cancel #%d: 204 for an expired ticket", tk.seq)
			}
			eff.cancelled = tk
		case unclaimedGrant:
			if L.holderAlive(w) == invNo {
				v.fail(L, "cancel #%d: 204 for a grant that ran out", tk.seq)
			}
			eff.freed = true
		default:
			v.fail(L, "cancel #%d: 204 for a ticket that is gone or claimed", tk.seq)
		}
	case http.StatusGone:
		wantStatus(v.t, r, http.StatusGone, "ticket-gone")
		if queued && w.alive(tk.exp) == invYes {
			v.fail(L, "cancel #%d: 410 for a live ticket", tk.seq)
		}
		if unclaimedGrant && L.holderAlive(w) == invYes {
			v.fail(L, "cancel #%d: 410 for its unclaimed grant", tk.seq)
		}
	default:
		v.fail(L, "cancel answered %d: %s", r.Status, r.Raw)
	}
	v.reconcile(L, eff)
}

// pickLease is the holder's lease when the client knows it, else a stale one.
func (v *invRun) pickLease(L *invLock) (id string, held bool) {
	if h := L.holder; h != nil && h.known && (len(L.stale) == 0 || v.rng.IntN(5) > 0) {
		return h.id, true
	}
	if len(L.stale) > 0 {
		return L.stale[v.rng.IntN(len(L.stale))], false
	}
	return "", false
}

func (v *invRun) release(L *invLock) {
	id, held := v.pickLease(L)
	if id == "" {
		v.acquire(L, false)
		return
	}
	r, w := v.do("release", req{Method: "DELETE", Path: L.path() + "/leases/" + id})
	v.note(L, "release held=%v: %d", held, r.Status)
	eff := invEffects{w: w}
	switch {
	case r.Status == http.StatusOK && held:
		h := L.holder
		if L.holderAlive(w) == invNo || r.Int("count") != int64(h.count-1) || r.Bool("released") != (h.count == 1) {
			v.fail(L, "release: %s, want count %d", r.Raw, h.count-1)
		}
		h.count--
		eff.freed = h.count == 0
	case r.Status == http.StatusNotFound:
		wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
		if held && L.holderAlive(w) == invYes {
			v.fail(L, "release: 404 for the live holder")
		}
	default:
		v.fail(L, "release held=%v answered %d: %s", held, r.Status, r.Raw)
	}
	v.reconcile(L, eff)
}

func (v *invRun) renew(L *invLock) {
	id, held := v.pickLease(L)
	if id == "" {
		v.acquire(L, true)
		return
	}
	var body any
	ttl := int64(0)
	if v.rng.IntN(3) > 0 {
		ttl = int64(100 + v.rng.IntN(201))
		body = map[string]any{"ttl_ms": ttl}
	}
	r, w := v.do("renew", req{Method: "PATCH", Path: L.path() + "/leases/" + id, Body: body})
	v.note(L, "renew held=%v ttl %d: %d", held, ttl, r.Status)
	switch {
	case r.Status == http.StatusOK && held:
		h := L.holder
		if ttl == 0 {
			ttl = h.ttl
		}
		if L.holderAlive(w) == invNo || r.Int("fence") != h.fence || r.Int("count") != int64(h.count) ||
			r.Int("ttl_ms") > ttl || r.Int("ttl_ms") < ttl-(w.recv-w.sent)-invSlack {
			v.fail(L, "renew: %s, want fence %d count %d ttl_ms about %d", r.Raw, h.fence, h.count, ttl)
		}
		h.ttl, h.unclaimed, h.confirmed = ttl, false, true
	case r.Status == http.StatusNotFound:
		wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
		if held && L.holderAlive(w) == invYes {
			v.fail(L, "renew: 404 for the live holder")
		}
	default:
		v.fail(L, "renew held=%v answered %d: %s", held, r.Status, r.Raw)
	}
	v.reconcile(L, invEffects{w: w})
}

func (v *invRun) reenter(L *invLock) {
	id, held := v.pickLease(L)
	if id == "" || (held && L.holder.count >= 3) {
		v.release(L)
		return
	}
	ttl := int64(100 + v.rng.IntN(201))
	r, w := v.do("re-enter", req{Method: "POST", Path: L.path(), Body: map[string]any{"lease": id, "ttl_ms": ttl}})
	v.note(L, "re-enter held=%v ttl %d: %d", held, ttl, r.Status)
	switch {
	case r.Status == http.StatusOK && held:
		h := L.holder
		if L.holderAlive(w) == invNo || r.Int("fence") != h.fence || r.Int("count") != int64(h.count+1) ||
			r.Str("lease") != id {
			v.fail(L, "re-entry: %s, want fence %d count %d", r.Raw, h.fence, h.count+1)
		}
		h.count++
		h.ttl, h.unclaimed, h.confirmed = ttl, false, true
	case r.Status == http.StatusNotFound:
		wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
		if held && L.holderAlive(w) == invYes {
			v.fail(L, "re-entry: 404 for the live holder")
		}
	default:
		v.fail(L, "re-entry held=%v answered %d: %s", held, r.Status, r.Raw)
	}
	v.reconcile(L, invEffects{w: w})
}

// reenterStale re-enters (or renews, or releases) a lease that is no longer held.
func (v *invRun) reenterStale(L *invLock) {
	if len(L.stale) == 0 {
		v.acquire(L, false)
		return
	}
	id := L.stale[v.rng.IntN(len(L.stale))]
	r, w := v.do("re-enter stale", req{Method: "POST", Path: L.path(), Body: map[string]any{"lease": id}})
	v.note(L, "re-enter stale: %d", r.Status)
	wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
	v.reconcile(L, invEffects{w: w})
}

func (v *invRun) force(L *invLock) {
	r, w := v.do("force", req{Method: "DELETE", Path: L.path() + "?force=true"})
	v.note(L, "force: %d released=%v", r.Status, r.Bool("released"))
	if r.Status != http.StatusOK {
		v.fail(L, "force answered %d: %s", r.Status, r.Raw)
	}
	switch alive := L.holderAlive(w); {
	case r.Bool("released") && alive == invNo, !r.Bool("released") && alive == invYes:
		v.fail(L, "force released=%v, but the holder was alive: %v", r.Bool("released"), alive)
	}
	v.reconcile(L, invEffects{w: w, freed: r.Bool("released")})
}

func (v *invRun) state(L *invLock) {
	qexp := L.qexp
	r, w := v.do("state", req{Method: "GET", Path: L.path()})
	v.note(L, "state: %d held=%v waiters %d", r.Status, r.Bool("held"), r.Int("waiters"))
	if r.Status != http.StatusOK {
		v.fail(L, "state answered %d: %s", r.Status, r.Raw)
	}
	if L.holderAlive(w) == invYes && !r.Bool("held") {
		v.fail(L, "state: not held while the holder was alive")
	}
	s := v.reconcile(L, invEffects{w: w, state: r})
	if h := L.holder; r.Bool("held") {
		if h == nil || r.Int("fence") != h.fence || r.Int("count") != int64(h.count) || r.Str("owner") != h.owner {
			// Only a lease ending between the answer and the look explains a free lock.
			if h != nil || r.Int("ttl_ms") > s.now-w.sent+invSlack {
				v.fail(L, "state %s, model holder %+v", r.Raw, h)
			}
		}
	} else if r.Int("fence") != L.lastFence {
		v.fail(L, "state of a free lock: fence %d, want the last issued %d", r.Int("fence"), L.lastFence)
	}
	// Only the queue key running out between the answer and the look explains a
	// difference.
	if r.Int("waiters") != int64(len(s.q)) && !(len(s.q) == 0 && qexp >= 0 && qexp < s.now+invSlack) {
		v.fail(L, "state: waiters %d, queue has %d entries", r.Int("waiters"), len(s.q))
	}
	// GET prunes dead tickets from the head of the queue (DESIGN.md: every script
	// does, before deciding): the head left is a ticket that was alive then.
	if len(s.q) == 0 {
		return
	}
	head := s.q[0].Member.(string)
	if exp := L.dead[head]; exp != 0 && w.alive(exp) == invNo {
		seq := 0
		for _, tk := range L.gone {
			if tk.th == head {
				seq = tk.seq
			}
		}
		v.violation(L, "queue head without a live ticket after GET",
			"GET /v1/locks/%s (held=%v) left ticket #%d, which ran out %dms before the request, at the head of %d queue entries (%d live); waiters says %d",
			L.name, r.Bool("held"), seq, w.sent-exp, len(s.q), len(L.queue), r.Int("waiters"))
	}
}

func (v *invRun) leaseGet(L *invLock, h *invLease) {
	r, w := v.do("get lease", req{Method: "GET", Path: L.path() + "/leases/" + h.id})
	v.note(L, "get lease: %d", r.Status)
	switch r.Status {
	case http.StatusOK:
		if L.holderAlive(w) == invNo || r.Int("fence") != h.fence || r.Int("count") != int64(h.count) ||
			r.Str("lease") != h.id || r.Str("owner") != h.owner {
			v.fail(L, "GET lease %s, model: fence %d count %d owner %s", r.Raw, h.fence, h.count, h.owner)
		}
	case http.StatusNotFound:
		wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
		if L.holderAlive(w) == invYes {
			v.fail(L, "GET lease: 404 for the live holder")
		}
	default:
		v.fail(L, "GET lease answered %d: %s", r.Status, r.Raw)
	}
	v.reconcile(L, invEffects{w: w})
}

func (v *invRun) leaseGetStale(L *invLock) {
	id := L.stale[v.rng.IntN(len(L.stale))]
	r, w := v.do("get stale lease", req{Method: "GET", Path: L.path() + "/leases/" + id})
	v.note(L, "get stale lease: %d", r.Status)
	wantStatus(v.t, r, http.StatusNotFound, "lease-not-held")
	v.reconcile(L, invEffects{w: w})
}

// invEffects is what a step's answer says it did.
type invEffects struct {
	w         invWindow
	freed     bool       // the holder's lease ended (release to 0, force, cancel of its grant)
	granted   *invLease  // a 201
	kept      *invTicket // a 202 (new ticket or poll): it lives TicketTTL from now
	position  int        // that 202's position
	cancelled *invTicket // a 204 cancel of a queued ticket
	claimed   *invTicket // a queued ticket's poll answered 200
	state     *resp      // the answer of GET /v1/locks/{name}
}

// invSnap is one lock's keys, read in one atomic script. Expiry times are
// absolute (PEXPIRETIME: PTTL would count each key from the moment it is read),
// -1 for a key without one and -2 for a missing key.
type invSnap struct {
	now     int64
	lock    map[string]string
	lockExp int64
	fence   string
	q       []redis.Z
	qExp    int64
	tExp    map[string]int64 // ticket hash -> its key's expiry
}

// left is a key's remaining time at the look, or its -1 or -2.
func (s invSnap) left(exp int64) int64 {
	if exp < 0 {
		return exp
	}
	return max(exp-s.now, 0)
}

var invLook = redis.NewScript(`
local t = redis.call('TIME')
local tk = {}
for i = 3, #KEYS do tk[#tk + 1] = redis.call('PEXPIRETIME', KEYS[i]) end
return {t[1], t[2], redis.call('GET', KEYS[1]) or '', redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'),
  redis.call('PEXPIRETIME', KEYS[2]), tk}
`)

func (v *invRun) look(L *invLock) invSnap {
	v.t.Helper()
	lock := v.prefix + ":" + L.key()
	keys := []string{lock, lock + ":q"}
	for _, tk := range L.queue {
		keys = append(keys, lock+":t:"+tk.th)
	}
	res, err := invLook.Run(context.Background(), v.rdb, keys).Slice()
	if err != nil {
		v.t.Fatalf("look at Redis: %v", err)
	}
	sec, _ := strconv.ParseInt(res[0].(string), 10, 64)
	usec, _ := strconv.ParseInt(res[1].(string), 10, 64)
	s := invSnap{now: sec*1000 + usec/1000, lock: map[string]string{}, lockExp: -2, qExp: res[4].(int64),
		tExp: map[string]int64{}}
	lv := parseLock(res[2].(string))
	s.fence = lv.fence()
	if lv.x != nil { // the exclusive hold, while its deadline has not passed
		if d, _ := strconv.ParseInt(lv.x["deadline"], 10, 64); d >= s.now {
			s.lock, s.lockExp = lv.x, d
		}
	}
	q := res[3].([]any)
	for i := 0; i+1 < len(q); i += 2 {
		score, _ := strconv.ParseFloat(q[i+1].(string), 64)
		s.q = append(s.q, redis.Z{Member: q[i].(string), Score: score})
	}
	for i, p := range res[5].([]any) {
		s.tExp[L.queue[i].th] = p.(int64)
	}
	return s
}

// reconcile reads the lock's keys after a step, checks them against the model and
// the step's answer, and moves the model on to what Redis holds.
func (v *invRun) reconcile(L *invLock, eff invEffects) invSnap {
	v.t.Helper()
	s := v.look(L)
	prev := L.holder
	var next *invLease
	lh := s.lock["lease"]
	switch {
	case len(s.lock) == 0:
	case lh == "":
		v.fail(L, "lock hash without a lease: %v", s.lock)
	case prev != nil && lh == prev.lh:
		next = prev
	case eff.granted != nil && lh == eff.granted.lh:
		next = eff.granted
	default:
		for i, tk := range L.queue {
			if tk.lh == lh {
				next = v.ticketGrant(L, i, s, eff)
				break
			}
		}
		if next == nil {
			v.fail(L, "Redis holds the lock under a lease nobody was given: %v", s.lock)
		}
	}
	if eff.granted != nil && next != eff.granted {
		// The lease lives its ttl from when the script ran, which is no earlier
		// than the request was sent; a slow answer or a late look (a loaded
		// machine) can outlast it.
		if len(s.lock) != 0 || s.now < eff.w.sent+eff.granted.ttl-invSlack {
			v.fail(L, "201 answered, but Redis holds %v (the look %dms after the request was sent, ttl %d)",
				s.lock, s.now-eff.w.sent, eff.granted.ttl)
		}
		L.lastFence = eff.granted.fence
		L.stale = invKeep(L.stale, eff.granted.id)
		v.outcomes["event: granted lease ran out before the look"]++
	}
	if eff.claimed != nil && (next == nil || next.ticket != eff.claimed) {
		v.fail(L, "poll #%d answered 200, but Redis holds %v", eff.claimed.seq, s.lock)
	}
	if next != prev {
		if prev != nil {
			// A lease that was not released ends only by running out: before the
			// script that replaced it, or before this look.
			end := s.now
			if next != nil {
				end = eff.w.recv
			}
			if !eff.freed && prev.exp >= end+invSlack {
				v.fail(L, "the holder's lease (fence %d) ended %dms before its time", prev.fence, prev.exp-end)
			}
			switch {
			case eff.freed:
			case prev.unclaimed:
				v.outcomes["event: unclaimed grant ran out"]++
			default:
				v.outcomes["event: lease ran out"]++
			}
			L.stale = invKeep(L.stale, prev.id)
			if prev.ticket != nil {
				L.gone = invKeep(L.gone, prev.ticket)
			}
		}
		if next != nil {
			v.newGrant(L, next, s, eff)
			if next.ticket != nil {
				v.outcomes["event: ticket granted"]++
			}
		}
	} else if eff.freed && next != nil {
		v.fail(L, "the answer says the lease ended, but Redis still holds it: %v", s.lock)
	}
	L.holder = next
	if next != nil {
		v.checkHolder(L, next, s)
	}
	v.checkTickets(L, s, eff)
	if (eff.freed || (eff.state != nil && !eff.state.Bool("held"))) && next == nil && len(L.queue) > 0 {
		v.fail(L, "the lock was left free with ticket #%d alive in the queue (no handoff)", L.queue[0].seq)
	}
	if want := strconv.FormatInt(L.lastFence, 10); s.fence != want && !(L.lastFence == 0 && s.fence == "") {
		v.fail(L, "fence key %q, want the last fence issued %s", s.fence, want)
	}
	v.checkKeys(L)
	return s
}

// ticketGrant is a grant to the queued ticket L.queue[i] seen in Redis: the tickets
// before it must all have been gone by then.
func (v *invRun) ticketGrant(L *invLock, i int, s invSnap, eff invEffects) *invLease {
	tk := L.queue[i]
	for _, early := range L.queue[:i] {
		if early == eff.cancelled {
			continue // cancelled by this step, which then handed the lock on
		}
		if s.tExp[early.th] != -2 || early.exp >= eff.w.recv+invSlack {
			v.fail(L, "ticket #%d was granted while the earlier ticket #%d was alive (key pttl %d, exp in %dms)",
				tk.seq, early.seq, s.left(s.tExp[early.th]), early.exp-eff.w.recv)
		}
	}
	if eff.w.alive(tk.exp) == invNo {
		v.fail(L, "ticket #%d was granted after it expired", tk.seq)
	}
	if s.tExp[tk.th] != -2 {
		v.fail(L, "ticket #%d was granted but its key is still there", tk.seq)
	}
	id := invTicketLease(tk.id)
	g := &invLease{id: id, lh: tk.lh, owner: tk.owner, count: 1, ttl: tk.ttl, ticket: tk,
		unclaimed: eff.claimed != tk, known: eff.claimed == tk}
	if eff.claimed == tk {
		g.handOut()
	}
	return g
}

// newGrant checks a grant made in this step: a fence above every earlier one, and
// no live ticket overtaken.
func (v *invRun) newGrant(L *invLock, g *invLease, s invSnap, eff invEffects) {
	fence, _ := strconv.ParseInt(s.lock["fence"], 10, 64)
	if fence <= L.lastFence {
		v.fail(L, "new grant with fence %d, not above the last %d", fence, L.lastFence)
	}
	if g.ticket == nil {
		if g.fence != fence {
			v.fail(L, "201 fence %d, Redis has %d", g.fence, fence)
		}
		for _, tk := range L.queue {
			if s.tExp[tk.th] != -2 || tk.exp >= eff.w.recv+invSlack {
				v.fail(L, "an acquire was granted while ticket #%d was alive (key pttl %d)", tk.seq, s.left(s.tExp[tk.th]))
			}
		}
	}
	at, _ := strconv.ParseInt(s.lock["at"], 10, 64)
	if at < eff.w.sent-invSlack || at > eff.w.recv+invSlack {
		v.fail(L, "grant time %d outside the step [%d, %d]", at, eff.w.sent, eff.w.recv)
	}
	g.fence = fence
	L.lastFence = fence
}

// checkHolder compares the lock hash with the model's holder.
func (v *invRun) checkHolder(L *invLock, h *invLease, s invSnap) {
	tk := ""
	if h.unclaimed {
		tk = h.ticket.th
	}
	if s.lock["fence"] != strconv.FormatInt(h.fence, 10) || s.lock["count"] != strconv.Itoa(h.count) ||
		s.lock["owner"] != h.owner || s.lock["ttl"] != strconv.FormatInt(h.ttl, 10) || s.lock["tk"] != tk {
		v.fail(L, "lock hash %v, model: fence %d count %d owner %s ttl %d tk %q", s.lock, h.fence, h.count, h.owner, h.ttl, tk)
	}
	limit := h.ttl
	if h.unclaimed {
		limit = invTicketTTL.Milliseconds()
	}
	if p := s.left(s.lockExp); p < 0 || p > limit {
		v.fail(L, "lock pttl %d, want within [0, %d]", p, limit)
	}
	h.exp = s.lockExp
}

// checkTickets moves tickets whose key is gone out of the queue (they must have
// run out, unless cancelled or granted) and checks the :q sorted set.
func (v *invRun) checkTickets(L *invLock, s invSnap, eff invEffects) {
	var live []*invTicket
	for _, tk := range L.queue {
		if L.holder != nil && L.holder.ticket == tk {
			continue
		}
		switch p := s.left(s.tExp[tk.th]); {
		case p == -2:
			if tk != eff.cancelled && tk.exp >= s.now+invSlack {
				v.fail(L, "ticket #%d's key vanished %dms before its time", tk.seq, tk.exp-s.now)
			}
			if tk != eff.cancelled {
				v.outcomes["event: ticket ran out"]++
			}
			L.gone = invKeep(L.gone, tk)
			L.dead[tk.th] = tk.exp
		case p < 0 || p > invTicketTTL.Milliseconds():
			v.fail(L, "ticket #%d key pttl %d, want within [0, %d]", tk.seq, p, invTicketTTL.Milliseconds())
		case tk == eff.cancelled:
			v.fail(L, "ticket #%d cancelled, but its key is still there", tk.seq)
		default:
			if tk == eff.kept && p < invTicketTTL.Milliseconds()-(s.now-eff.w.sent)-invSlack {
				v.fail(L, "ticket #%d kept alive by this step, but its key has %dms left", tk.seq, p)
			}
			tk.exp = s.tExp[tk.th]
			live = append(live, tk)
		}
	}
	L.queue = live
	L.qexp = s.qExp

	// :q is the live tickets in arrival order, with dead ones among them.
	j := 0
	inQueue := map[string]bool{}
	for k, z := range s.q {
		m := z.Member.(string)
		inQueue[m] = true
		switch {
		case j < len(live) && live[j].th == m:
			if eff.kept == live[j] && eff.position != k+1 {
				v.fail(L, "ticket #%d answered position %d, queue place %d", live[j].seq, eff.position, k+1)
			}
			j++
		case L.dead[m] != 0:
		default:
			v.fail(L, "queue entry %d is neither a live ticket in arrival order nor a gone one", k)
		}
	}
	if j != len(live) {
		v.fail(L, "live ticket #%d is missing from the queue", live[j].seq)
	}
	for th := range L.dead {
		if !inQueue[th] {
			delete(L.dead, th)
		}
	}
	if len(live) > 0 {
		var last int64
		for _, tk := range live {
			last = max(last, tk.exp)
		}
		if s.qExp >= 0 && s.qExp < last {
			v.fail(L, "queue key expires in %dms, before its live ticket (%dms)", s.left(s.qExp), s.left(last))
		}
	}
}

// checkKeys lists every key of the lock: the lock, its queue and its live
// tickets, nothing else.
func (v *invRun) checkKeys(L *invLock) {
	lock := v.prefix + ":" + L.key()
	keys, err := allKeys(context.Background(), v.rdb, lock+"*")
	if err != nil {
		v.t.Fatal(err)
	}
	live := map[string]bool{}
	for _, tk := range L.queue {
		live[lock+":t:"+tk.th] = true
	}
	for _, k := range keys {
		if k != lock && k != lock+":q" && !live[k] {
			v.fail(L, "unexpected key %s", strings.TrimPrefix(k, lock))
		}
	}
}

// invKeep appends to a bounded list of things for negative checks.
func invKeep[T any](list []T, x T) []T {
	list = append(list, x)
	if len(list) > 10 {
		list = list[1:]
	}
	return list
}

// drain cancels every ticket and releases every lease, waits for what is left to
// expire, and checks that only the locks' keys, with only their fences, remain.
func (v *invRun) drain() {
	v.step = 0
	for _, L := range v.locks {
		for range 50 {
			switch h := L.holder; {
			case len(L.queue) > 0:
				tk := L.queue[len(L.queue)-1]
				r, w := v.do("drain", req{Method: "DELETE", Path: L.path() + "/tickets/" + tk.id})
				v.note(L, "drain: cancel #%d: %d", tk.seq, r.Status)
				if r.Status != http.StatusNoContent && w.alive(tk.exp) == invYes {
					v.fail(L, "drain: cancel of live ticket #%d answered %d", tk.seq, r.Status)
				}
				eff := invEffects{w: w}
				if r.Status == http.StatusNoContent {
					eff.cancelled = tk
				}
				v.reconcile(L, eff)
			case h != nil && h.unclaimed:
				r, w := v.do("drain", req{Method: "DELETE", Path: L.path() + "/tickets/" + h.ticket.id})
				v.note(L, "drain: cancel the grant of #%d: %d", h.ticket.seq, r.Status)
				v.reconcile(L, invEffects{w: w, freed: r.Status == http.StatusNoContent})
			case h != nil:
				r, w := v.do("drain", req{Method: "DELETE", Path: L.path() + "/leases/" + h.id})
				v.note(L, "drain: release: %d", r.Status)
				if r.Status == http.StatusOK {
					h.count--
				}
				v.reconcile(L, invEffects{w: w, freed: r.Status == http.StatusOK && h.count == 0})
			}
			if L.holder == nil && len(L.queue) == 0 {
				break
			}
		}
		if L.holder != nil || len(L.queue) > 0 {
			v.fail(L, "drain: still held or queued")
		}
	}
	time.Sleep(invTicketTTL + 100*time.Millisecond) // every ticket and lease runs out
	for _, L := range v.locks {
		r, _ := v.do("drain", req{Method: "GET", Path: L.path()})
		if r.Status != http.StatusOK || r.Bool("held") || r.Int("waiters") != 0 {
			v.fail(L, "drain: state %d %s, want free with no waiters", r.Status, r.Raw)
		}
	}
	keys, err := allKeys(context.Background(), v.rdb, v.prefix+":*")
	if err != nil {
		v.t.Fatal(err)
	}
	for _, k := range keys {
		if !fenceOnly(v.rdb, k) {
			v.t.Errorf("after draining, Redis still holds %s (%s)", k, v.rdb.Type(context.Background(), k).Val())
		}
	}
}

// The mixed-modes driver: exclusive and shared holds on the same locks.
// TestInvariantsMixedModes drives random sequences of exclusive and shared
// acquires (fair or not, under a few limits, some of them mismatched), polls,
// cancels, re-entries, renewals, releases and forces over three locks on two
// gateways, with short leases and tickets, and after every step reads each lock's
// keys in one atomic script and checks, against Redis itself:
//   - never an exclusive hold beside another hold;
//   - never more shared holds than their limit, and all under one limit;
//   - every new hold's fence above every fence seen before it;
//   - grants follow arrival order among live tickets: no ticket (and no request
//     that did not queue) is granted while an earlier ticket is still queued
//     alive;
//   - every 201 and 200 answer is a hold Redis has, of the mode asked for;
//   - at the end, nothing but fence keys.
//
// The model needs no clock: each check reads what Redis holds after the step.
// BATON_INVARIANTS_SEED replays a sequence of choices (timing may still differ).
func TestInvariantsMixedModes(t *testing.T) { onBoth(t, testInvariantsMixedModes) }

func testInvariantsMixedModes(t *testing.T, cluster bool) {
	seed := uint64(20261124)
	if s := os.Getenv("BATON_INVARIANTS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BATON_INVARIANTS_SEED %q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (BATON_INVARIANTS_SEED=%d replays it)", seed, seed)
	e1 := newEnv(t, envOptions{Cluster: cluster, TicketTTL: invTicketTTL})
	e2 := newEnv(t, envOptions{Cluster: cluster, TicketTTL: invTicketTTL, Prefix: e1.Prefix})
	m := &mixRun{invDriver: newInvDriver(t, seed, 0x51ed2701, e1, e2)}
	for _, n := range []string{"m1", "m2", "m3"} {
		m.locks = append(m.locks, &mixLock{name: n, seen: map[string]bool{}})
	}
	budget := time.Now().Add(15 * time.Second)
	for m.step = 1; m.step <= 2500 && time.Now().Before(budget); m.step++ {
		L := m.locks[m.rng.IntN(len(m.locks))]
		m.randomStep(L)
		m.check(L)
	}
	t.Logf("%d steps; outcomes: %v", m.step-1, m.outcomes)
	m.drain()
}

type mixHold struct {
	id     string
	shared bool
	limit  int
}

type mixTicket struct {
	id, th, tlh string
	seq         int
	shared      bool
	limit       int
}

type mixLock struct {
	name     string
	holds    []*mixHold   // leases clients were given (maybe expired since)
	tickets  []*mixTicket // tickets clients were given (maybe gone since)
	maxFence int64
	seen     map[string]bool // hold hashes already checked as new
}

type mixRun struct {
	invDriver
	locks []*mixLock
	// granted is what the step's answer says it got: a hold id and its mode.
	granted *mixHold
	// queuedBefore are the tickets (hashes) that were queued alive before the step.
	queuedBefore map[string]int
}

func (m *mixRun) note(L *mixLock, format string, args ...any) {
	m.remember(L.name, format, args...)
}

func (m *mixRun) fail(L *mixLock, format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d, lock %s (seed %d): %s\nlast steps:\n  %s", m.step, L.name, m.seed,
		fmt.Sprintf(format, args...), m.lastSteps())
}

func (m *mixRun) do(L *mixLock, op string, r req) *resp {
	m.t.Helper()
	res := m.gateway().do(r)
	m.outcomes[op+" "+strconv.Itoa(res.Status)]++
	m.note(L, "%s: %d", op, res.Status)
	return res
}

// limits is a lock's usual limit (0: none), and now and then another one.
func (m *mixRun) limit(L *mixLock) int {
	usual := []int{2, 3, 0}[slices.Index(m.locks, L)]
	if m.rng.IntN(10) == 0 {
		return []int{1, 2, 3, 0}[m.rng.IntN(4)]
	}
	return usual
}

func (m *mixRun) randomStep(L *mixLock) {
	m.granted = nil
	m.queuedBefore = m.liveQueue(L)
	switch n := m.rng.IntN(100); {
	case n < 30:
		m.acquire(L)
	case n < 48:
		m.poll(L)
	case n < 53:
		m.cancel(L)
	case n < 70:
		m.release(L)
	case n < 77:
		m.renew(L)
	case n < 83:
		m.reenter(L)
	case n < 85:
		wantStatus(m.t, m.do(L, "force", req{Method: "DELETE", Path: "/v1/locks/" + L.name + "?force=true"}), http.StatusOK, "")
	case n < 95:
		st := m.do(L, "state", req{Method: "GET", Path: "/v1/locks/" + L.name})
		wantStatus(m.t, st, http.StatusOK, "")
	default:
		d := time.Duration(20+m.rng.IntN(250)) * time.Millisecond
		m.note(L, "sleep %v", d)
		time.Sleep(d) // time itself is the event: holds and tickets expire
	}
}

func (m *mixRun) acquire(L *mixLock) {
	shared := m.rng.IntN(3) > 0
	fair := m.rng.IntN(2) == 0
	body := map[string]any{"ttl_ms": 100 + m.rng.IntN(300), "fair": fair}
	limit := 0
	if shared {
		body["shared"] = true
		if limit = m.limit(L); limit > 0 {
			body["limit"] = limit
		}
	}
	r := m.do(L, fmt.Sprintf("acquire shared=%v limit=%d fair=%v", shared, limit, fair),
		req{Method: "POST", Path: "/v1/locks/" + L.name, Body: body})
	switch r.Status {
	case http.StatusCreated:
		if r.Bool("shared") != shared {
			m.fail(L, "asked shared=%v, granted %s", shared, r.Raw)
		}
		h := &mixHold{id: r.Str("lease"), shared: shared, limit: limit}
		L.holds = append(L.holds, h)
		m.granted = h
	case http.StatusAccepted:
		m.seq++
		id := r.Str("ticket")
		L.tickets = append(L.tickets, &mixTicket{id: id, th: invHash(id), tlh: invHash(invTicketLease(id)),
			seq: m.seq, shared: shared, limit: limit})
	case http.StatusLocked:
	case http.StatusConflict:
		wantStatus(m.t, r, http.StatusConflict, "limit-mismatch")
		if !shared {
			m.fail(L, "an exclusive request got 409: %s", r.Raw)
		}
	default:
		m.fail(L, "acquire answered %d: %s", r.Status, r.Raw)
	}
}

func (m *mixRun) pickTicket(L *mixLock) *mixTicket {
	if len(L.tickets) == 0 {
		return nil
	}
	return L.tickets[len(L.tickets)-1-m.rng.IntN(min(len(L.tickets), 6))]
}

func (m *mixRun) pickHold(L *mixLock) *mixHold {
	if len(L.holds) == 0 {
		return nil
	}
	return L.holds[len(L.holds)-1-m.rng.IntN(min(len(L.holds), 6))]
}

func (m *mixRun) poll(L *mixLock) {
	tk := m.pickTicket(L)
	if tk == nil {
		m.acquire(L)
		return
	}
	r := m.do(L, "poll", req{Method: "GET", Path: "/v1/locks/" + L.name + "/tickets/" + tk.id + "?wait_ms=0"})
	switch r.Status {
	case http.StatusOK:
		if r.Bool("shared") != tk.shared || r.Str("lease") != invTicketLease(tk.id) {
			m.fail(L, "ticket shared=%v granted %s", tk.shared, r.Raw)
		}
		h := &mixHold{id: r.Str("lease"), shared: tk.shared, limit: tk.limit}
		if !slices.ContainsFunc(L.holds, func(x *mixHold) bool { return x.id == h.id }) {
			L.holds = append(L.holds, h)
		}
		m.granted = h
	case http.StatusAccepted, http.StatusGone:
	default:
		m.fail(L, "poll answered %d: %s", r.Status, r.Raw)
	}
}

func (m *mixRun) cancel(L *mixLock) {
	tk := m.pickTicket(L)
	if tk == nil {
		return
	}
	r := m.do(L, "cancel", req{Method: "DELETE", Path: "/v1/locks/" + L.name + "/tickets/" + tk.id})
	if r.Status != http.StatusNoContent && r.Status != http.StatusGone {
		m.fail(L, "cancel answered %d: %s", r.Status, r.Raw)
	}
}

func (m *mixRun) release(L *mixLock) {
	h := m.pickHold(L)
	if h == nil {
		m.acquire(L)
		return
	}
	r := m.do(L, "release", req{Method: "DELETE", Path: "/v1/locks/" + L.name + "/leases/" + h.id})
	if r.Status != http.StatusOK && r.Status != http.StatusNotFound {
		m.fail(L, "release answered %d: %s", r.Status, r.Raw)
	}
}

func (m *mixRun) renew(L *mixLock) {
	h := m.pickHold(L)
	if h == nil {
		return
	}
	r := m.do(L, "renew", req{Method: "PATCH", Path: "/v1/locks/" + L.name + "/leases/" + h.id,
		Body: map[string]any{"ttl_ms": 100 + m.rng.IntN(300)}})
	switch {
	case r.Status == http.StatusOK && r.Bool("shared") != h.shared:
		m.fail(L, "renewed a hold of the other mode: %s", r.Raw)
	case r.Status != http.StatusOK && r.Status != http.StatusNotFound:
		m.fail(L, "renew answered %d: %s", r.Status, r.Raw)
	}
}

func (m *mixRun) reenter(L *mixLock) {
	h := m.pickHold(L)
	if h == nil {
		return
	}
	body := map[string]any{"lease": h.id, "ttl_ms": 100 + m.rng.IntN(300)}
	mismatch := false
	if m.rng.IntN(4) == 0 {
		body["shared"] = !h.shared
		mismatch = true
	}
	r := m.do(L, "re-enter", req{Method: "POST", Path: "/v1/locks/" + L.name, Body: body})
	switch {
	case r.Status == http.StatusOK && mismatch:
		m.fail(L, "re-entry naming the other mode answered 200: %s", r.Raw)
	case r.Status == http.StatusBadRequest && mismatch:
	case r.Status == http.StatusOK && r.Bool("shared") != h.shared:
		m.fail(L, "re-entered a hold of the other mode: %s", r.Raw)
	case r.Status != http.StatusOK && r.Status != http.StatusNotFound:
		m.fail(L, "re-entry answered %d: %s", r.Status, r.Raw)
	}
}

// mixSnap is one lock's holds and queue, read in one atomic script.
type mixSnap struct {
	now       int64
	exclusive map[string]string // the exclusive hold's fields; empty if none
	shared    map[string]map[string]string
	limit     string
	queue     []string        // ticket hashes in arrival order
	alive     map[string]bool // ticket hash -> its key exists
}

var mixLook = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lock = KEYS[1]
local q, alive = redis.call('ZRANGE', lock .. ':q', 0, -1), {}
for i, th in ipairs(q) do alive[i] = redis.call('EXISTS', lock .. ':t:' .. th) end
return {tostring(now), redis.call('GET', lock) or '', redis.call('HGETALL', lock .. ':h'), q, alive}
`)

func hashOf(pairs []any) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		out[pairs[i].(string)] = pairs[i+1].(string)
	}
	return out
}

func (m *mixRun) look(L *mixLock) mixSnap {
	m.t.Helper()
	res, err := mixLook.Run(context.Background(), m.rdb, []string{m.prefix + ":{" + L.name + "}"}).Slice()
	if err != nil {
		m.t.Fatalf("look: %v", err)
	}
	s := mixSnap{exclusive: map[string]string{}, shared: map[string]map[string]string{}, alive: map[string]bool{}}
	s.now, _ = strconv.ParseInt(res[0].(string), 10, 64)
	// The lock's holds (live while their deadline has not passed) and the
	// shared holds' limit.
	live := func(rec map[string]string) bool {
		d, _ := strconv.ParseInt(rec["deadline"], 10, 64)
		return d >= s.now
	}
	lv := parseLock(res[1].(string))
	if lv.x != nil && live(lv.x) {
		s.exclusive = lv.x
	}
	for _, v := range hashOf(res[2].([]any)) {
		if rec := holdRecord(v); live(rec) {
			s.shared[rec["lease"]] = rec
		}
	}
	if len(s.shared) > 0 {
		s.limit = lv.parts[4]
	}
	for i, th := range res[3].([]any) {
		s.queue = append(s.queue, th.(string))
		s.alive[th.(string)] = res[4].([]any)[i].(int64) == 1
	}
	return s
}

func (m *mixRun) liveQueue(L *mixLock) map[string]int {
	s := m.look(L)
	out := map[string]int{}
	for i, th := range s.queue {
		if s.alive[th] {
			out[th] = i
		}
	}
	return out
}

// check reads the lock after a step and checks the invariants.
func (m *mixRun) check(L *mixLock) {
	m.t.Helper()
	s := m.look(L)
	holds := map[string]map[string]string{}
	for h, f := range s.shared {
		holds[h] = f
	}
	if len(s.exclusive) > 0 {
		if len(s.shared) > 0 {
			m.fail(L, "an exclusive hold beside %d shared holds", len(s.shared))
		}
		holds[s.exclusive["lease"]] = s.exclusive
	}
	if len(s.shared) > 0 {
		lim, _ := strconv.Atoi(s.limit)
		if lim > 0 && len(s.shared) > lim {
			m.fail(L, "%d shared holds under limit %d", len(s.shared), lim)
		}
		for h, f := range s.shared {
			if f["lim"] != s.limit {
				m.fail(L, "shared hold %.8s under limit %q beside the lock's %q", h, f["lim"], s.limit)
			}
		}
	}
	// New holds: fences above every fence seen before this step.
	var fresh []int64
	for h, f := range holds {
		if L.seen[h] {
			continue
		}
		L.seen[h] = true
		fence, _ := strconv.ParseInt(f["fence"], 10, 64)
		if fence <= L.maxFence {
			m.fail(L, "new hold with fence %d, not above %d", fence, L.maxFence)
		}
		fresh = append(fresh, fence)
		// Granted to a ticket: no earlier ticket may still be queued alive.
		tk := m.ticketOf(L, h)
		for th, pos := range m.queuedBefore {
			if !s.alive[th] || tk != nil && th == tk.th {
				continue
			}
			earlier := tk == nil
			if tk != nil {
				if mine, ok := m.queuedBefore[tk.th]; ok && pos < mine {
					earlier = true
				}
			}
			if earlier {
				m.fail(L, "a hold (ticket %v) was granted while an earlier ticket is still queued alive", tk != nil)
			}
		}
	}
	for _, f := range fresh {
		L.maxFence = max(L.maxFence, f)
	}
	// The answer's grant is in Redis, of its mode.
	if g := m.granted; g != nil {
		f, ok := holds[invHash(g.id)]
		if ok && (f["lim"] != "") != g.shared {
			m.fail(L, "granted shared=%v, Redis holds it in the other mode", g.shared)
		}
	}
}

func (m *mixRun) ticketOf(L *mixLock, holdHash string) *mixTicket {
	for _, tk := range L.tickets {
		if tk.tlh == holdHash {
			return tk
		}
	}
	return nil
}

// drain ends everything and checks that nothing but fences is left.
func (m *mixRun) drain() {
	for _, L := range m.locks {
		for _, tk := range L.tickets {
			m.envs[0].do(req{Method: "DELETE", Path: "/v1/locks/" + L.name + "/tickets/" + tk.id})
		}
		wantStatus(m.t, m.envs[0].do(req{Method: "DELETE", Path: "/v1/locks/" + L.name + "?force=true"}), http.StatusOK, "")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, k := range m.envs[0].keys() {
			if !m.envs[0].fenceOnly(k) {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("keys left after the run: %v", left)
		}
		time.Sleep(50 * time.Millisecond) // tickets and queues expire on their own
	}
}
