package main

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/client"
	"github.com/batonhq/baton/internal/batontest"
	"github.com/batonhq/baton/internal/redistest"
)

// TestSmoke runs the harness's cheapest paths against a real redis-server, so
// that `go test ./...` keeps it compiling and working: redis-script uncontended
// at concurrency 1 for 2 s (a pair counts only if it starts and ends inside the
// window, which must hold some on a loaded machine too), and a round of
// redis-script handoffs.
func TestSmoke(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pid, err := redisPID(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRedisClient(srv.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScriptLocker(rdb, "smoke")

	u, err := uncontended(ctx, target{system: sysRedisScript, pair: s.pair, pids: []int{pid}, redis: rdb}, 1, 500*time.Millisecond, 2*time.Second, 0, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	if u.ops <= 0 || u.p50 <= 0 || u.p99 < u.p50 || u.errors != 0 || u.redisCPU <= 0 {
		t.Errorf("uncontended: got %+v, want pairs with p99 >= p50 > 0, Redis CPU and no errors", u)
	}

	h, err := handoff(ctx, scriptHandoff(rdb, s), 2, 4, "smoke-h")
	if err != nil {
		t.Fatal(err)
	}
	if h.grants < 4 || h.inversions != 0 || h.p50 <= 0 {
		t.Errorf("handoff: got %+v, want >= 4 grants in order", h)
	}
}

func TestInversions(t *testing.T) {
	for _, tt := range []struct {
		give []int
		want int
	}{
		{give: nil, want: 0},
		{give: []int{0, 1, 2, 3}, want: 0},
		{give: []int{1, 0, 2, 3}, want: 1},
		{give: []int{3, 2, 1, 0}, want: 3},
		{give: []int{0, 2, 1, 3}, want: 1},
	} {
		if got := inversions(tt.give); got != tt.want {
			t.Errorf("inversions(%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		give []float64
		want float64
	}{
		{give: nil, want: 0},
		{give: []float64{3}, want: 3},
		{give: []float64{5, 1, 3}, want: 3},
		{give: []float64{4, 1, 3, 2}, want: 2.5},
	} {
		if got := median(tt.give); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// TestNames runs the names scenario's measurement on a few hundred names: Baton's
// scripts leave one key per name (its fence) until the guard has passed,
// redislock nothing, and a system that leaves a key behind fails with
// errLeftover.
func TestNames(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rdb := newRedisClient(srv.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	// Every fence key is still there when the last pair ends only if the
	// first one's guard has not passed yet: the guard is longer than the 300
	// pairs take on a loaded machine (4 s at 75 pairs/s).
	const n, guard = 300, 5 * time.Second
	const bound = 10 * time.Second
	// noBytes is how far from 0 the bytes left after the guard may be and still
	// count as none. Redis's own bookkeeping (its cron resizes the clients'
	// buffers and emptied hash tables) moves used_memory less the clients'
	// tot-mem by a few KB between two idle moments, more than namesZero's
	// 0.5 B per name of 300 names; a fence key left per name would be 50 KB.
	const noBytes = 16 << 10

	x, err := namesRun(ctx, rdb, namesSystem{sysRedisScript, newScriptLockerWith(rdb, "t", guard, guard).pair}, n, guard, bound)
	if err != nil {
		t.Fatal(err)
	}
	// Right after the last release: each name's key, with its fence.
	if x.KeysReleased != n || x.InGuard <= 0 || x.KeysGuard != 0 || math.Abs(x.NameGuard)*n >= noBytes || x.Errors != 0 {
		t.Errorf("redis-script: got %+v, want %d keys and bytes after the release, none after the guard", x, n)
	}
	if gone := time.Duration(x.GoneMs) * time.Millisecond; gone < guard {
		t.Errorf("redis-script: keys gone %v after the last release, want at least the guard %v", gone, guard)
	}

	rl := newRedislockLocker(rdb, "t-rl:")
	x, err = namesRun(ctx, rdb, namesSystem{sysRedislock, rl.pair}, n, guard, bound)
	if err != nil {
		t.Fatal(err)
	}
	if x.KeysReleased != 0 || x.KeysGuard != 0 || max(x.BytesGuard, -x.BytesGuard) >= noBytes {
		t.Errorf("redislock: got %+v, want no key at all", x)
	}

	leaky := func(ctx context.Context, name string) error { return rdb.Set(ctx, "leak:"+name, 1, 0).Err() }
	x, err = namesRun(ctx, rdb, namesSystem{"leaky", leaky}, 10, 100*time.Millisecond, 100*time.Millisecond)
	if !errors.Is(err, errLeftover) || x.KeysGuard != 10 || !x.Scanned {
		t.Errorf("leaky: got %+v, %v; want errLeftover with 10 keys after a SCAN", x, err)
	}
}

func TestClientsMemory(t *testing.T) {
	for _, tt := range []struct {
		give    string
		want    int64
		wantErr bool
	}{
		{give: "id=3 addr=127.0.0.1:1 tot-mem=22400 name=bench\n", want: 22400},
		{give: "id=3 tot-mem=100 x=1\nid=4 tot-mem=20\n", want: 120},
		{give: "id=3 addr=127.0.0.1:1\n", wantErr: true},
		{give: "id=3 tot-mem=lots\n", wantErr: true},
	} {
		got, err := clientsMemory(tt.give)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("clientsMemory(%q) = %d, %v; want %d, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCountLabel(t *testing.T) {
	for _, tt := range []struct {
		give int
		want string
	}{
		{give: 10000, want: "10k"},
		{give: 1000000, want: "1M"},
		{give: 1500, want: "1500"},
		{give: 300, want: "300"},
	} {
		if got := countLabel(tt.give); got != tt.want {
			t.Errorf("countLabel(%d) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestPrebuilt(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "baton")
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		give    string
		want    string
		wantErr bool
	}{
		{give: exe, want: exe},
		{give: plain, wantErr: true},
		{give: dir, wantErr: true},
		{give: filepath.Join(dir, "missing"), wantErr: true},
	} {
		got, err := prebuilt(tt.give)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("prebuilt(%q) = %q, %v; want %q, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
	if got := binaryCommit(plain); got != "" {
		t.Errorf("binaryCommit(a text file) = %q, want none", got)
	}
}

// TestSharedScript runs the shared scenario's redis-script side against a real
// redis-server: overlapping shared pairs on one lock, and runs of shared tickets
// that one release grants together.
func TestSharedScript(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pid, err := redisPID(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRedisClient(srv.Addr())
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScriptLocker(rdb, "smoke")

	pair := func(ctx context.Context, _ string) error { return s.sharedPair(ctx, "one") }
	u, err := uncontended(ctx, target{system: sysRedisScript, pair: pair, pids: []int{pid}}, 4, 50*time.Millisecond, 200*time.Millisecond, 0, "smoke-s")
	if err != nil {
		t.Fatal(err)
	}
	if u.ops <= 0 || u.errors != 0 {
		t.Errorf("shared pairs: got %+v, want pairs and no errors", u)
	}
	if n, err := rdb.Exists(ctx, "smoke:{one}:s", "smoke:{one}:h", "smoke:{one}:q").Result(); err != nil || n != 0 {
		t.Errorf("after the shared pairs: %d hold or queue keys left (%v), want none", n, err)
	}

	r, err := sharedRounds(ctx, scriptSharedRound(rdb, s), 4, 3, "smoke-run")
	if err != nil {
		t.Fatal(err)
	}
	if r.rounds != 3 || r.firstP50 <= 0 || r.lastP50 < r.firstP50 || r.lastP99 < r.lastP50 {
		t.Errorf("shared rounds: got %+v, want 3 rounds with 0 < first <= last", r)
	}
}

// TestSharedBaton runs the shared scenario's Baton side against a real Baton:
// a shared pair over HTTP, and runs of long-polled shared tickets.
func TestSharedBaton(t *testing.T) {
	srv := batontest.Start(t, batontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := newBatonShared(srv.URL)
	t.Cleanup(b.hc.CloseIdleConnections)
	for range 3 {
		if err := b.pair(ctx, "one"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := sharedRounds(ctx, b.round, 4, 2, "run")
	if err != nil {
		t.Fatal(err)
	}
	if r.rounds != 2 || r.firstP50 <= 0 || r.lastP50 < r.firstP50 {
		t.Errorf("shared rounds: got %+v, want 2 rounds with 0 < first <= last", r)
	}
}

// TestKeysMode checks -auth-compare's pieces against real Batons: the keys file
// it writes is valid and grants lock on every name, its client's Bearer key is
// accepted, and a Baton that serves without a key is caught.
func TestKeysMode(t *testing.T) {
	key := auth.NewKey()
	path, err := writeKeysFile(t.TempDir(), key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.ReadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("keys file: got %d keys, want 1", len(keys))
	}
	if k := keys[0]; k.SHA256 != auth.KeySHA256(key) || len(k.Allow) != 1 || !k.Allow[0].Allows(auth.ActionLock, "any:name") {
		t.Errorf("keys file: got %+v, want the key's hash granted lock on every name", k)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keyed := batontest.Start(t, batontest.Options{Keys: true})
	if err := checkKeysMode(ctx, keyed.URL, keyed.Keys.Full); err != nil {
		t.Errorf("keys mode: %v", err)
	}
	if err := batonPair(keyClient(keyed.URL, keyed.Keys.Full), 0)(ctx, "pair"); err != nil {
		t.Errorf("a pair with the key: %v", err)
	}
	open := batontest.Start(t, batontest.Options{})
	if err := checkKeysMode(ctx, open.URL, keyed.Keys.Full); err == nil {
		t.Error("protected mode passed the keys-mode check, want an error")
	}
}

func TestBearer(t *testing.T) {
	var got string
	rt := bearer{header: "Bearer k", next: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header.Get("Authorization")
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
	})}
	req, err := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got != "Bearer k" || req.Header.Get("Authorization") != "" {
		t.Errorf("sent %q, caller's request now %q; want the header sent and the caller's request untouched",
			got, req.Header.Get("Authorization"))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestObserve: expiry latencies are kept signed, and a grant before the lower
// bound of the lease end is flagged.
func TestObserve(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 200 * time.Millisecond
	for _, tt := range []struct {
		name      string
		got, won  time.Duration // after t0, the holder's request being sent
		wantLat   time.Duration
		wantEarly bool
	}{
		{"after the end", 1 * time.Millisecond, 204 * time.Millisecond, 3 * time.Millisecond, false},
		{"negative, holder's answer slow", 5 * time.Millisecond, 202 * time.Millisecond, -3 * time.Millisecond, false},
		{"granted during the lease", 1 * time.Millisecond, 150 * time.Millisecond, -51 * time.Millisecond, true},
	} {
		o := observe(t0, t0.Add(tt.got), ttl, t0.Add(tt.won))
		if o.lat != tt.wantLat || o.early != tt.wantEarly {
			t.Errorf("%s: got %+v, want lat %v early %v", tt.name, o, tt.wantLat, tt.wantEarly)
		}
	}
	xs := []time.Duration{-2, 1, 3, 5}
	if got := rank(xs, 50); got != 1 {
		t.Errorf("rank 50 = %v, want 1", got)
	}
	if got := rank(xs, 99); got != 5 {
		t.Errorf("rank 99 = %v, want 5", got)
	}
}

// TestCommands counts the floor's pair under MONITOR, with a PING on another
// connection in every pair that must count as background, and the keys that
// the floor and a leaky system leave per released name.
func TestCommands(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rdb, stats := newRedisClient(srv.Addr()), statsClient(srv.Addr())
	t.Cleanup(func() { _, _ = rdb.Close(), stats.Close() })
	floor := newFloorLocker(rdb, floorPrefix).pair
	pair := func(ctx context.Context, name string) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return err
		}
		return floor(ctx, name)
	}
	const n = 50
	c, err := countCommands(ctx, stats, pair, "one", n)
	if err != nil {
		t.Fatal(err)
	}
	// SET and EVALSHA sent, GET and DEL run by the script.
	if c.pair != 4*n || c.inner != 2*n || c.top["set"] != n || c.lua["del"] != n || c.background["ping"] != n {
		t.Errorf("got %+v, want %d lines of pairs (%d in scripts) and %d PINGs apart", c, 4*n, 2*n, n)
	}
	if x, err := execTime(ctx, stats, pair, "one", n, c); err != nil || x <= 0 {
		t.Errorf("command time: got %v µs per pair, %v; want some", x, err)
	}
	if k, err := keysLeft(ctx, stats, floor, "kpn.floor.", 100); err != nil || k != 0 {
		t.Errorf("floor: %v keys per released name, %v; want 0", k, err)
	}
	leaky := func(ctx context.Context, name string) error { return rdb.Set(ctx, "leak:{"+name+"}", 1, 0).Err() }
	if k, err := keysLeft(ctx, stats, leaky, "kpn.leaky.", 100); err != nil || k != 1 {
		t.Errorf("leaky: %v keys per released name, %v; want 1", k, err)
	}
}

// TestHello: the hello server answers Baton's client as Baton would a pair.
func TestHello(t *testing.T) {
	srv := httptest.NewServer(helloHandler())
	t.Cleanup(srv.Close)
	if err := batonPair(client.New(srv.URL), 0)(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
}

// TestBudgets judges each figure on its rows: a figure whose rows are missing
// is not measured, and the reference's figure is given beside it, not judged.
func TestBudgets(t *testing.T) {
	r := &results{
		Commands: []commandsRow{
			{System: sysBaton, PerPair: 41, ExecPerPair: 120, KeysPerName: 2},
			{System: sysBatonRef, PerPair: 8, ExecPerPair: 20, KeysPerName: 1},
			{System: sysFloor, PerPair: 4, ExecPerPair: 8},
		},
		Uncontended: []uncontendedRow{
			{System: sysBaton, Durability: durMemory, Concurrency: 16, OpsPerSec: 3000, ServerCPU: 100, ProcessCPU: 60, RedisCPU: 40},
			{System: sysHello, Durability: durMemory, Concurrency: 16, OpsPerSec: 9000, ServerCPU: 50, ProcessCPU: 50},
			{System: sysFloor, Durability: durMemory, Concurrency: 16, OpsPerSec: 9000, ServerCPU: 10, RedisCPU: 10},
		},
		Handoff: []handoffRow{{System: sysBaton, Waiters: 16, P50: 0.3}, {System: sysRedisScript, Waiters: 16, P50: 0.1}},
	}
	want := []string{"MISS", "MISS", "MISS", "MISS", "PASS", notMeasured, notMeasured, "MISS", notMeasured}
	bs := evaluateBudgets(r)
	if len(bs) != len(want) {
		t.Fatalf("got %d figures, want %d", len(bs), len(want))
	}
	for i, b := range bs {
		if b.Status != want[i] {
			t.Errorf("%s: got %s (%s), want %s", b.Figure, b.Status, b.Baton, want[i])
		}
	}
	if bs[0].Reference == "" || bs[2].Reference != "" {
		t.Errorf("reference: got %q and %q, want the commands figure only", bs[0].Reference, bs[2].Reference)
	}
}
