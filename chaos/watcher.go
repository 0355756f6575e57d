package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/batonhq/baton/chaos/check"
	"github.com/batonhq/baton/client"
)

// watcher is a client that watches locks change hands: it reads a
// lock's state and, while the lock is held, long-polls it with that fence
// (GET /v1/locks/{name}?wait_ms=N&fence=F), again and again, on either Baton
// process. check.Watches then requires every watch to have returned soon after
// the lock stopped being held with its fence: released, expired or handed on.
type watcher struct {
	caller
	cfg   *config
	rng   *rand.Rand
	locks []string
}

func newWatcher(id int, cfg *config, cls []*client.Client, rec *check.Recorder, tal *tally, locks []string) *watcher {
	w := &watcher{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, uint64(id))), locks: locks}
	w.caller = caller{id: id, cls: cls, rec: rec, tal: tal, pick: func() int { return w.rng.IntN(len(cls)) }}
	return w
}

func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		name := w.locks[w.rng.IntN(len(w.locks))]
		sctx, cancel := context.WithTimeout(ctx, opSlack)
		st, err := w.cls[w.rng.IntN(len(w.cls))].State(sctx, name)
		cancel()
		w.tal.refused.note(err, false)
		if err != nil || !st.Held {
			// Nothing announces that a lock was taken: look again soon.
			time.Sleep(5*time.Millisecond + time.Duration(w.rng.Int64N(int64(15*time.Millisecond))))
			continue
		}
		wait := 100*time.Millisecond + time.Duration(w.rng.Int64N(int64(w.cfg.maxWatch-100*time.Millisecond)))
		w.watch(name, st.Fence, wait)
	}
}
