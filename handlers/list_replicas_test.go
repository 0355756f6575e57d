package handlers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/batonhq/baton/internal/batontest"
	"github.com/batonhq/baton/internal/redistest"
)

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
