package handlers_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"testing"
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
		return url.QueryEscape("v2-1-0-" + base64.RawURLEncoding.EncodeToString([]byte(names)))
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
