package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/api"
	"github.com/batonhq/baton/handlers"
	"github.com/batonhq/baton/metrics"
	"github.com/batonhq/baton/store"
)

// countingStore counts the readiness checks that reach the store.
type countingStore struct {
	*store.Store
	ready atomic.Int64
}

func (c *countingStore) Ready(ctx context.Context) error {
	c.ready.Add(1)
	return c.Store.Ready(ctx)
}

// /readyz is open to everyone, so a flood of probes must not become a flood
// of Redis commands: its answer is reused for about a second, and probes that
// come while a check runs share it. Once the server starts shutting down it
// answers 503 at once, whatever it last found.
func TestReadyzIsCachedAndDrainsAtOnce(t *testing.T) {
	e := newEnv(t, envOptions{})
	cs := &countingStore{Store: e.Store}
	draining := make(chan struct{})
	srv := httptest.NewServer(handlers.NewServer(handlers.Deps{Store: cs, Limits: handlers.Limits{MaxTTL: time.Hour, MaxWait: time.Second},
		Logger: zerolog.Nop(), Metrics: metrics.New(), Spec: api.Spec, Draining: draining}))
	t.Cleanup(srv.Close)
	probe := func() int {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Error(err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if st := probe(); st != http.StatusOK {
					t.Errorf("/readyz: %d", st)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if n, most := cs.ready.Load(), int64(took/time.Second)+2; n < 1 || n > most {
		t.Errorf("200 probes in %v reached the store %d times, want 1 to %d", took, n, most)
	}
	before := cs.ready.Load()
	pollUntil(t, 5*time.Second, "a probe after the cache's second checks again", func() bool {
		probe()
		return cs.ready.Load() > before
	})
	close(draining)
	if st := probe(); st != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %d, want 503 at once", st)
	}
}
