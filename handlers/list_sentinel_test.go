package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/internal/redistest"
)

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
