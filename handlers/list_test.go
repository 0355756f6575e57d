package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/batontest"
	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/redis/go-redis/v9"
)

// listAll follows next_cursor from the first page to the last and returns the
// names listed, in order, and the pages it took.
func (e *env) listAll(query string, header map[string]string) ([]string, int) {
	e.t.Helper()
	var names []string
	cursor, pages := "", 0
	for {
		q := query
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(req{Method: "GET", Path: "/v1/locks?" + q, Header: header})
		wantStatus(e.t, r, http.StatusOK, "")
		pages++
		for _, l := range r.Body["locks"].([]any) {
			names = append(names, l.(map[string]any)["name"].(string))
		}
		next, _ := r.Body["next_cursor"].(string)
		if next == "" {
			return names, pages
		}
		cursor = next
		if pages > 1000 {
			e.t.Fatal("the listing did not end")
		}
	}
}

func TestListLocks(t *testing.T) { onBoth(t, testListLocks) }

func testListLocks(t *testing.T, cluster bool) {
	e := newEnv(t, envOptions{Cluster: cluster})
	var want []string
	for i := range 25 {
		n := "list:" + strconv.Itoa(i)
		e.acquire(n, map[string]any{"ttl_ms": 30000})
		want = append(want, n)
	}
	e.share("list:shared", nil)
	want = append(want, "list:shared")
	// Held before, free now: not listed. Queued only behind a holder: listed (held).
	gone := e.acquire("list:gone", nil)
	e.release(gone)
	e.acquire("other:1", nil)
	sort.Strings(want)

	got, pages := e.listAll("prefix=list:&limit=4", nil)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v\nwant %v", got, want)
	}
	if pages < 7 {
		t.Errorf("%d pages of at most 4 for %d locks", pages, len(want))
	}
	all, _ := e.listAll("limit=1000", nil)
	if !slices.Contains(all, "other:1") || slices.Contains(all, "list:gone") {
		t.Errorf("all locks %v: want other:1, not list:gone", all)
	}
	r := e.do(req{Method: "GET", Path: "/v1/locks?prefix=list:shared"})
	l := r.Body["locks"].([]any)[0].(map[string]any)
	if l["mode"] != "shared" || l["holders"] != json.Number("1") {
		t.Errorf("listed shared lock %v", l)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "prefix=a%20b", "cursor=nonsense", "cursor=", "sort=name"} {
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks?" + bad}), http.StatusBadRequest, "invalid-request")
	}
}

// A key lists only the names its grants let it read.
func TestListLocksByGrant(t *testing.T) { onBoth(t, testListLocksByGrant) }

func testListLocksByGrant(t *testing.T, cluster bool) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Cluster: cluster, Keys: k.file()})
	for _, n := range []string{"billing:1", "billing:2", "payroll:1"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + n, Body: map[string]any{}, Header: bearer(k.ops)}), http.StatusCreated, "")
	}
	got, _ := e.listAll("limit=10", bearer(k.billing))
	sort.Strings(got)
	if !slices.Equal(got, []string{"billing:1", "billing:2"}) {
		t.Errorf("billing-web lists %v, want only billing:*", got)
	}
	all, _ := e.listAll("limit=10", bearer(k.reader))
	if len(all) != 3 {
		t.Errorf("the reader lists %v, want all 3", all)
	}
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks", Header: bearer(k.slow)}), http.StatusOK, "")
}

// A cursor carries the names of a batch a page did not get to: one made up
// lists no name outside the prefix or the key's grants, and one whose names
// could not be lock names is refused.
func TestListMadeUpCursor(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	for _, n := range []string{"billing:1", "payroll:1", "other:1"} {
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/" + n, Body: map[string]any{}, Header: bearer(k.ops)}), http.StatusCreated, "")
	}
	carrying := func(names string) string {
		return url.QueryEscape("v2-end-0-" + base64.RawURLEncoding.EncodeToString([]byte(names)))
	}
	r := e.do(req{Method: "GET", Path: "/v1/locks?prefix=billing:&cursor=" + carrying("billing:1,payroll:1,other:1"), Header: bearer(k.billing)})
	wantStatus(t, r, http.StatusOK, "")
	var got []string
	for _, l := range r.Body["locks"].([]any) {
		got = append(got, l.(map[string]any)["name"].(string))
	}
	if !slices.Equal(got, []string{"billing:1"}) || r.Body["next_cursor"] != nil {
		t.Errorf("a made-up cursor listed %v, next %v; want only billing:1 and the end", got, r.Body["next_cursor"])
	}
	for _, bad := range []string{"billing:1,x}y", "billing:1,,billing:2", "a{b}"} {
		wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks?cursor=" + carrying(bad), Header: bearer(k.reader)}), http.StatusBadRequest, "invalid-request")
	}
}

// Paging through many locks while others are taken and released: the listing
// ends within a bound, every lock held from start to end is listed, and no
// next_cursor comes back twice (a cursor that repeats is a loop). Keys come
// and go between pages, so each SCAN batch a cursor goes back to may end
// elsewhere than it did for the page before.
func TestListWhileLocksComeAndGo(t *testing.T) { onBoth(t, testListWhileLocksComeAndGo) }

func testListWhileLocksComeAndGo(t *testing.T, cluster bool) {
	const held, churnNames, churners, limit = 3000, 600, 4, 7
	o := envOptions{Cluster: cluster}
	if !cluster {
		o.Redis = redistest.Start(t) // only this test's keys in each SCAN batch
	}
	e := newEnv(t, o)
	ctx := context.Background()

	want := map[string]bool{}
	names := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range names {
				r, err := e.Store.Acquire(ctx, store.AcquireRequest{Name: n, TTL: 5 * time.Minute})
				if err != nil || r.Lease == nil {
					t.Errorf("acquire %s: %+v, %v", n, r, err)
				}
			}
		}()
	}
	for i := range held {
		n := fmt.Sprintf("held:%04d", i)
		want[n] = true
		names <- n
	}
	close(names)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Churners take and release locks (names reused, so lock keys appear and
	// disappear) until the paging is done.
	stop := make(chan struct{})
	var churns sync.WaitGroup
	var cycles atomic.Int64
	for c := range churners {
		churns.Add(1)
		go func() {
			defer churns.Done()
			for i := c; ; i += churners {
				select {
				case <-stop:
					return
				default:
				}
				n := fmt.Sprintf("churn:%d", i%churnNames)
				r, err := e.Store.Acquire(ctx, store.AcquireRequest{Name: n, TTL: time.Minute})
				if err != nil {
					t.Errorf("churn acquire %s: %v", n, err)
					return
				}
				if r.Lease != nil {
					if _, err := e.Store.Release(ctx, store.Ref{Name: n, ID: r.Lease.ID}); err != nil {
						t.Errorf("churn release %s: %v", n, err)
						return
					}
				}
				cycles.Add(1)
			}
		}()
	}
	defer func() { close(stop); churns.Wait() }()

	// Every name can be listed at most a few times (SCAN may return a key
	// twice), so the pages are bounded by the names there can be.
	maxPages := 3*(held+churnNames)/limit + 50
	seen := map[string]int{}
	cursors := map[string]int{}
	cursor, pages := "", 0
	for {
		q := fmt.Sprintf("limit=%d", limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(req{Method: "GET", Path: "/v1/locks?" + q})
		wantStatus(t, r, http.StatusOK, "")
		pages++
		locks := r.Body["locks"].([]any)
		if len(locks) > limit {
			t.Fatalf("page %d: %d locks, limit %d", pages, len(locks), limit)
		}
		for _, l := range locks {
			seen[l.(map[string]any)["name"].(string)]++
		}
		next, _ := r.Body["next_cursor"].(string)
		if next == "" {
			break
		}
		if p, ok := cursors[next]; ok {
			t.Fatalf("page %d gave next_cursor %q again, first given by page %d: a loop", pages, next, p)
		}
		cursors[next] = pages
		cursor = next
		if pages > maxPages {
			t.Fatalf("the listing did not end within %d pages of %d locks", maxPages, limit)
		}
	}
	var missing []string
	for n := range want {
		if seen[n] == 0 {
			missing = append(missing, n)
		}
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("%d pages, %d names listed, %d listed twice or more, %d churn cycles", pages, len(seen), dups, cycles.Load())
	if len(missing) > 0 {
		t.Errorf("%d locks held throughout were never listed, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
}

// A cursor survives other replicas: two Baton processes on one Redis, the
// pages asked of each in turn, and every lock is listed exactly once. The
// locks fill several SCAN batches and pages end inside them, so what a
// cursor carries is all the next gateway has to go on.
func TestListAcrossGateways(t *testing.T) {
	const locks, limit = 1200, 50
	rdb := redistest.Start(t)
	gws := []*batontest.Server{batontest.Start(t, batontest.Options{Redis: rdb}), batontest.Start(t, batontest.Options{Redis: rdb})}

	names := make(chan string)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range names {
				res, err := http.Post(gws[w%2].URL+"/v1/locks/"+n, "application/json", bytes.NewReader([]byte(`{"ttl_ms": 300000}`)))
				if err != nil {
					t.Errorf("acquire %s: %v", n, err)
					continue
				}
				res.Body.Close()
				if res.StatusCode != http.StatusCreated {
					t.Errorf("acquire %s: status %d", n, res.StatusCode)
				}
			}
		}()
	}
	want := map[string]bool{}
	for i := range locks {
		n := fmt.Sprintf("gw:%04d", i)
		want[n] = true
		names <- n
	}
	close(names)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		gw := gws[pages%2]
		q := fmt.Sprintf("?prefix=gw:&limit=%d", limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		res, err := http.Get(gw.URL + "/v1/locks" + q)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Locks []struct {
				Name string `json:"name"`
			} `json:"locks"`
			NextCursor *string `json:"next_cursor"`
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("page %d from gateway %d: status %d, %v", pages+1, pages%2, res.StatusCode, err)
		}
		pages++
		if len(page.Locks) > limit {
			t.Fatalf("page %d: %d locks, limit %d", pages, len(page.Locks), limit)
		}
		for _, l := range page.Locks {
			seen[l.Name]++
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		if pages > 4*locks/limit {
			t.Fatalf("no end after %d pages", pages)
		}
	}
	if pages < locks/limit {
		t.Errorf("%d pages of at most %d for %d locks", pages, limit, locks)
	}
	for n := range want {
		if seen[n] != 1 {
			t.Errorf("%s listed %d times, want once", n, seen[n])
		}
	}
	for n := range seen {
		if !want[n] {
			t.Errorf("%s listed: not a lock taken", n)
		}
	}
	if t.Failed() {
		t.Logf("gateway 0:\n%s\ngateway 1:\n%s", gws[0].Logs(), gws[1].Logs())
	}
}

// Listing on a Sentinel deployment (a master, a replica, a sentinel; Baton on
// the redis+sentinel URL): every lock is listed, a page at a time, and again
// after a failover, read from the promoted master, with a lock taken there.
func TestListOnSentinel(t *testing.T) {
	if _, err := redistest.SentinelBinary(); err != nil {
		t.Fatal(err)
	}
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	sen := redistest.MustStartSentinel(t, redistest.SentinelConfig{MasterName: "locks", Master: master.Addr()})
	e := newEnv(t, envOptions{Redis: master, RedisURL: "redis+sentinel://" + sen.Addr() + "/locks/0"})
	ctx := context.Background()

	var want []string
	for i := range 30 {
		n := fmt.Sprintf("sen:%02d", i)
		e.acquire(n, map[string]any{"ttl_ms": 120000})
		want = append(want, n)
	}
	e.acquire("other:1", nil)
	listed := func() []string {
		t.Helper()
		got, pages := e.listAll("prefix=sen:&limit=4", nil)
		if pages < 8 {
			t.Errorf("%d pages of at most 4 for %d locks", pages, len(want))
		}
		sort.Strings(got)
		return got
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Fatalf("listed %v\nwant %v", got, want)
	}

	// Failover: the replica has every lock (WAIT), the sentinel knows it, and
	// SENTINEL FAILOVER promotes it; +switch-master says when.
	if n, err := master.Client(t).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr()})
	t.Cleanup(func() { _ = sc.Close() })
	sub := sc.Subscribe(ctx, "+switch-master")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := sc.Failover(ctx, "locks").Err()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			t.Fatalf("SENTINEL FAILOVER: %v\n%s", err, sen.Log())
		}
		time.Sleep(100 * time.Millisecond) // until the sentinel has met the replica: it says so in no event we can await
	}
	select {
	case m := <-sub.Channel():
		if !strings.HasSuffix(m.Payload, fmt.Sprintf(" %d", replica.Port)) {
			t.Fatalf("+switch-master %q: want the replica, port %d", m.Payload, replica.Port)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no +switch-master within 20s\n%s", sen.Log())
	}

	// The sentinel demotes the old master only when it next reports itself a
	// master (seconds later), and until then Baton may still write there: it
	// is demoted now, as an operator would, so it refuses writes (READONLY).
	if err := master.Client(t).ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(replica.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	// A lock taken now is written on the promoted master, and the listing,
	// read there, has it with all the others.
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := e.do(req{Method: "POST", Path: "/v1/locks/sen:new", Body: map[string]any{"ttl_ms": 120000}})
		if r.Status == http.StatusCreated {
			break
		}
		if r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("acquire after the failover: status %d: %s", r.Status, r.Raw)
		}
		time.Sleep(100 * time.Millisecond) // Baton finds the new master on its next connection
	}
	if n, err := replica.Client(t).Exists(ctx, e.Prefix+":{sen:new}").Result(); err != nil || n != 1 {
		t.Fatalf("the new lock on the promoted master: %d, %v", n, err)
	}
	want = append(want, "sen:new")
	if got := listed(); !slices.Equal(got, want) {
		t.Errorf("after the failover: listed %v\nwant %v", got, want)
	}
}
