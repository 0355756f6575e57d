package store_test

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
	"github.com/batonhq/baton/store"
	"github.com/batonhq/baton/store/redisconn"
)

var shared *redistest.Server

// clusterOnce starts, on first use, the cluster the tests that leave it whole
// share (sharedCluster).
var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
	stopCluster = func() {}
)

func TestMain(m *testing.M) {
	s, stop := redistest.MustStartMain()
	shared = s
	code := m.Run()
	stop()
	stopCluster()
	os.Exit(code)
}

// sharedCluster is a 3-master, 3-replica cluster for tests that kill no node.
func sharedCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	clusterOnce.Do(func() { cluster, stopCluster = redistest.MustStartClusterMain() })
	return cluster
}

var prefixes atomic.Int64

// newStore returns a store on the shared Redis with a prefix of its own.
func newStore(t *testing.T, opt store.Options) *store.Store {
	t.Helper()
	return newStoreOn(t, shared, opt)
}

func newStoreOn(t *testing.T, srv *redistest.Server, opt store.Options) *store.Store {
	t.Helper()
	rdb, err := redisconn.NewClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opt.Prefix == "" {
		opt.Prefix = "t" + strconv.FormatInt(prefixes.Add(1), 10) + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	}
	opt.Logger = zerolog.New(zerolog.NewTestWriter(t))
	s := store.New(rdb, opt)
	t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
	return s
}
