package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
)

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
