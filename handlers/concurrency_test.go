package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/internal/redistest"
)

// Tests of many clients on one lock: holds never overlap, fences grow in grant
// order, and a release wakes one waiter, not all of them.

func TestHammerOneLock(t *testing.T) {
	const workers, rounds = 32, 10
	tests := []struct {
		give     string
		replicas int // gateways sharing one prefix on one Redis
	}{
		{give: "one gateway", replicas: 1},
		{give: "two gateways on one Redis", replicas: 2},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			envs := []*env{newEnv(t, envOptions{})}
			for len(envs) < tt.replicas {
				envs = append(envs, newEnv(t, envOptions{Prefix: envs[0].Prefix}))
			}
			var (
				holding  atomic.Int32 // clients that believe they hold the lock now
				mu       sync.Mutex
				last     int64 // fence of the latest grant
				grants   int
				retries  atomic.Int32 // 423s: a non-fair waiter may lose every race
				start    = make(chan struct{})
				wg       sync.WaitGroup
				began    = time.Now()
				holdOnce = func(e *env, who string) bool {
					r, err := e.try(req{Method: "POST", Path: "/v1/locks/hammer",
						Body: map[string]any{"wait_ms": 30000, "ttl_ms": 10000, "owner": who}})
					switch {
					case err != nil:
						t.Errorf("%s: acquire: %v", who, err)
						return true
					case r.Status == http.StatusLocked:
						retries.Add(1)
						return false
					case r.Status != http.StatusCreated:
						t.Errorf("%s: acquire: status %d: %s", who, r.Status, r.Raw)
						return true
					}
					if n := holding.Add(1); n != 1 {
						t.Errorf("%s: granted while %d others hold the lock", who, n-1)
					}
					f := r.Int("fence")
					mu.Lock()
					if f <= last || f >= maxFence {
						t.Errorf("%s: fence %d granted after %d, want it larger (and < 2^53)", who, f, last)
					}
					last = f
					grants++
					mu.Unlock()
					// Hold briefly: the lease is ours while we look at it.
					if g, err := e.try(req{Method: "GET", Path: r.Str("url")}); err != nil || g.Status != http.StatusOK || g.Int("fence") != f {
						t.Errorf("%s: own lease while holding: %v %+v", who, err, g)
					}
					holding.Add(-1)
					d, err := e.try(req{Method: "DELETE", Path: r.Str("url")})
					if err != nil || d.Status != http.StatusOK || !d.Bool("released") {
						t.Errorf("%s: release: %v %+v", who, err, d)
					}
					return true
				}
			)
			for i := range workers {
				e := envs[i%len(envs)]
				who := "w" + strconv.Itoa(i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for done := 0; done < rounds; {
						if holdOnce(e, who) {
							done++
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			t.Logf("%d grants by %d clients on %d gateway(s) in %v (%d lost races answered 423)",
				grants, workers, len(envs), time.Since(began).Round(time.Millisecond), retries.Load())

			if grants != workers*rounds {
				t.Errorf("grants %d, want %d", grants, workers*rounds)
			}
			lv, _ := readLock(envs[0].Redis, envs[0].lockKey("hammer"))
			if got, _ := strconv.ParseInt(lv.fence(), 10, 64); got != last {
				t.Errorf("last fence %d, want the last fence granted %d", got, last)
			}
			st := envs[0].do(req{Method: "GET", Path: "/v1/locks/hammer"})
			if st.Bool("held") || st.Int("waiters") != 0 {
				t.Errorf("state after the run %s, want free", st.Raw)
			}
			for _, e := range envs {
				if n := testutil.ToFloat64(e.Metrics.Waiters); n != 0 {
					t.Errorf("waiters gauge %v after the run, want 0", n)
				}
			}
		})
	}
}

// Ten non-fair waiters on one lock: each release hands it to exactly one of them,
// promptly, and wakes no other (no thundering herd: counted as script calls on a
// Redis of the test's own).
func TestReleaseWakesOneWaiter(t *testing.T) {
	const n = 10
	srv := redistest.Start(t)
	e := newEnv(t, envOptions{Redis: srv})
	e.awaitReady() // scripts loaded: no NOSCRIPT round trips
	base := scriptCalls(t, e)

	h := e.acquire("herd", map[string]any{"ttl_ms": 30000})
	answers := make(chan answer, n)
	for i := range n {
		w := e.send(req{Method: "POST", Path: "/v1/locks/herd", Body: map[string]any{"wait_ms": 30000, "owner": "w" + strconv.Itoa(i)}})
		go func() { answers <- <-w }()
	}
	e.awaitWaiters(n)
	e.awaitSubscribers("herd", 1)

	holder, owners := h, map[string]bool{}
	var slowest time.Duration
	for i := range n {
		sent := time.Now()
		wantStatus(t, e.do(req{Method: "DELETE", Path: holder.Str("url")}), http.StatusOK, "")
		got := awaitAnswer(t, answers, 20*time.Second)
		wantStatus(t, got.r, http.StatusCreated, "")
		took := got.at.Sub(sent)
		slowest = max(slowest, took)
		if took > promptly {
			t.Errorf("release %d -> grant took %v, want it at the release (< %v)", i+1, took, promptly)
		}
		if got.r.Int("fence") <= holder.Int("fence") {
			t.Errorf("fence %d after %d", got.r.Int("fence"), holder.Int("fence"))
		}
		if owners[got.r.Str("owner")] {
			t.Errorf("%s granted twice", got.r.Str("owner"))
		}
		owners[got.r.Str("owner")] = true
		// Everyone else is still waiting.
		if w := testutil.ToFloat64(e.Metrics.Waiters); w != float64(n-1-i) {
			t.Fatalf("after release %d: waiters %v, want %d", i+1, w, n-1-i)
		}
		select {
		case extra := <-answers:
			t.Fatalf("after release %d a second waiter answered: %d %s", i+1, extra.r.Status, extra.r.Raw)
		default:
		}
		holder = got.r
	}
	t.Logf("release -> grant, slowest of %d: %s", n, fmtMs(slowest))

	// Script calls: the holder's acquire; per waiter its try on arrival and its
	// first check once subscribed; per release the release and the one woken
	// waiter's try. A herd would add a try for every waiter still waiting.
	want := 1 + 2*n + 2*n
	got := scriptCalls(t, e) - base
	t.Logf("script calls: %d (no herd: %d)", got, want)
	if got > want {
		t.Errorf("%d script calls, want %d: a release woke more than one waiter", got, want)
	}
}

// scriptCalls is how many script calls (FCALL, EVALSHA, EVAL) the env's Redis has run.
func scriptCalls(t *testing.T, e *env) int {
	t.Helper()
	stats, err := e.Redis.InfoMap(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, cmd := range []string{"cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"} {
		// calls=N,usec=...
		for _, kv := range strings.Split(stats["Commandstats"][cmd], ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.Atoi(v)
				total += n
			}
		}
	}
	return total
}
