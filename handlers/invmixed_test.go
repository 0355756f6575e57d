package handlers_test

import (
	"context"
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
	m := &mixRun{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x51ed2701)), envs: []*env{e1, e2},
		rdb: e1.Redis, prefix: e1.Prefix, outcomes: map[string]int{}}
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
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	envs     []*env
	rdb      redis.UniversalClient
	prefix   string
	locks    []*mixLock
	step     int
	seq      int
	hist     []string
	outcomes map[string]int
	// granted is what the step's answer says it got: a hold id and its mode.
	granted *mixHold
	// queuedBefore are the tickets (hashes) that were queued alive before the step.
	queuedBefore map[string]int
}

func (m *mixRun) note(L *mixLock, format string, args ...any) {
	m.hist = append(m.hist, fmt.Sprintf("%d %s: %s", m.step, L.name, fmt.Sprintf(format, args...)))
	if len(m.hist) > 20 {
		m.hist = m.hist[1:]
	}
}

func (m *mixRun) fail(L *mixLock, format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d, lock %s (seed %d): %s\nlast steps:\n  %s", m.step, L.name, m.seed,
		fmt.Sprintf(format, args...), strings.Join(m.hist, "\n  "))
}

func (m *mixRun) do(L *mixLock, op string, r req) *resp {
	m.t.Helper()
	res := m.envs[m.rng.IntN(len(m.envs))].do(r)
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
