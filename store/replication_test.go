package store_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

// waitCalls is how many WAIT commands srv has run (INFO commandstats).
func waitCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_wait:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestWaitReplicasAcknowledged(t *testing.T) {
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	met := metrics.New()
	s := newStoreOn(t, master, store.Options{WaitReplicas: 1, WaitTimeout: time.Second, Metrics: met})
	ctx := context.Background()
	if err := s.Ready(ctx); err != nil { // loads the scripts: no NOSCRIPT round below
		t.Fatal(err)
	}

	before := waitCalls(t, master)
	res, err := s.Acquire(ctx, store.AcquireRequest{Name: "w", TTL: 10 * time.Second})
	if err != nil || res.Lease == nil {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	if got := waitCalls(t, master) - before; got != 1 {
		t.Errorf("WAIT calls for one grant: got %d, want 1", got)
	}

	// A fair waiter handed the lock by a release answers only after a WAIT of its
	// own (the grant message can overtake the releaser's WAIT).
	got := make(chan store.AcquireResult, 1)
	go func() {
		r, err := s.Acquire(ctx, store.AcquireRequest{Name: "w", TTL: 10 * time.Second, Wait: 5 * time.Second, Fair: true})
		if err != nil {
			t.Errorf("fair acquire: %v", err)
		}
		got <- r
	}()
	for st, _ := s.State(ctx, "w"); st.Waiters != 1; st, _ = s.State(ctx, "w") {
		time.Sleep(5 * time.Millisecond) // the queue is only visible by asking
	}
	before = waitCalls(t, master)
	released := time.Now()
	if _, err := s.Release(ctx, store.Ref{Name: "w", ID: res.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("handoff took %v", d)
	}
	if r.Lease == nil || r.Lease.Fence <= res.Lease.Fence {
		t.Fatalf("waiter: got %+v, want a lease with a higher fence than %d", r, res.Lease.Fence)
	}
	if got := waitCalls(t, master) - before; got < 2 {
		t.Errorf("WAIT calls for a release and its handoff: got %d, want at least 2", got)
	}
	if n := testutil.ToFloat64(met.WaitUnacked); n != 0 {
		t.Errorf("baton_wait_unacked_total with a live replica: got %v, want 0", n)
	}
}

func TestWaitReplicasUnacknowledgedGrantStands(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	met := metrics.New()
	const timeout = 200 * time.Millisecond
	s := newStoreOn(t, master, store.Options{WaitReplicas: 1, WaitTimeout: timeout, Metrics: met})
	replica.Stop()

	start := time.Now()
	res, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "u", TTL: 10 * time.Second})
	took := time.Since(start)
	if err != nil || res.Lease == nil {
		t.Fatalf("acquire with no replica: got %+v, %v; want the grant to stand", res, err)
	}
	if took < timeout*3/4 {
		t.Errorf("acquire with no replica took %v: want the WAIT timeout (%v) waited out", took, timeout)
	}
	if n := testutil.ToFloat64(met.WaitUnacked); n != 1 {
		t.Errorf("baton_wait_unacked_total: got %v, want 1", n)
	}
	// A busy reply changes nothing: it is not counted.
	_, err = s.Acquire(context.Background(), store.AcquireRequest{Name: "u", TTL: time.Second})
	if _, ok := err.(*store.HeldError); !ok {
		t.Fatalf("second acquire: got %v, want a HeldError", err)
	}
	if n := testutil.ToFloat64(met.WaitUnacked); n != 1 {
		t.Errorf("baton_wait_unacked_total after a busy reply: got %v, want 1", n)
	}
}

func TestNoWaitByDefault(t *testing.T) {
	master := redistest.Start(t)
	s := newStoreOn(t, master, store.Options{})
	if _, err := s.Acquire(context.Background(), store.AcquireRequest{Name: "n", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := waitCalls(t, master); got != 0 {
		t.Errorf("WAIT calls with WaitReplicas 0: got %d, want 0", got)
	}
}

func TestSentinelURL(t *testing.T) {
	if _, err := redistest.SentinelBinary(); err != nil {
		t.Fatal(err)
	}
	master := redistest.Start(t)
	sen := redistest.MustStartSentinel(t, redistest.SentinelConfig{MasterName: "locks", Master: master.Addr()})
	rdb, err := redisconn.NewClient("redis+sentinel://127.0.0.1:1," + sen.Addr() + "/locks/0")
	if err != nil {
		t.Fatal(err)
	}
	s := store.New(rdb, store.Options{Prefix: "sentinel"})
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	ctx := context.Background()
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("ready through the sentinel: %v\n%s", err, sen.Log())
	}
	res, err := s.Acquire(ctx, store.AcquireRequest{Name: "s", TTL: 10 * time.Second})
	if err != nil || res.Lease == nil {
		t.Fatalf("acquire through the sentinel: %+v, %v", res, err)
	}
	if n, err := master.Client(t).Exists(ctx, "sentinel:{s}").Result(); err != nil || n != 1 {
		t.Errorf("lock key on the master: got %d, %v; want 1", n, err)
	}
}

func TestNewClientURLs(t *testing.T) {
	tests := []struct {
		give    string
		wantErr bool
	}{
		{give: "redis://127.0.0.1:6379/0"},
		{give: "rediss://127.0.0.1:6380"},
		{give: "redis+sentinel://127.0.0.1:26379/mymaster"},
		{give: "redis+sentinel://:secret@h1:26379,h2:26380,h3/mymaster/2"},
		{give: "redis+sentinel://h1/mymaster?sentinel_password=p&sentinel_username=u"},
		{give: "redis+sentinel://h1:26379", wantErr: true},
		{give: "redis+sentinel://h1:26379/", wantErr: true},
		{give: "redis+sentinel://h1:26379/m/x", wantErr: true},
		{give: "redis+sentinel://h1:26379/m/0/extra", wantErr: true},
		{give: "redis+sentinel://h1:26379,,h2/m", wantErr: true},
		{give: "redis+sentinel://h1/m?master_name=x", wantErr: true},
		{give: "sentinel://h1/m", wantErr: true},
		{give: "redis+cluster://127.0.0.1:7000"},
		{give: "redis+cluster://u:p@h1:7000,h2:7001,h3/0"},
		{give: "rediss+cluster://:secret@h1:7000,h2:7001/"},
		{give: "redis+cluster://h1:7000/1", wantErr: true},
		{give: "redis+cluster://h1:7000,,h2:7001", wantErr: true},
		{give: "redis+cluster://h1:7000?read_timeout=1s", wantErr: true},
		{give: "redis+cluster://", wantErr: true},
	}
	for _, tt := range tests {
		rdb, err := redisconn.NewClient(tt.give)
		if (err != nil) != tt.wantErr {
			t.Errorf("redisconn.NewClient(%q): got error %v, want error: %v", tt.give, err, tt.wantErr)
		}
		if rdb != nil {
			_ = rdb.Close()
		}
	}
}
