package embedded

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// push queues key for the sweeper at at, and wakes it if that is its new first
// deadline. The caller holds e.mu.
func (e *expiry) push(key string, at int64) {
	heap.Push(&e.queue, deadlineItem{at: at, key: key})
	if len(e.queue) > 2*len(e.deadlines)+1024 {
		e.compact()
	}
	if e.queue[0].at == at && e.queue[0].key == key {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// compact rebuilds the queue from the hints, without the entries of deadlines
// that were moved or deleted since (a lease released long before it would
// have run out): at most one O(n) rebuild per n pushes. The caller holds e.mu.
func (e *expiry) compact() {
	e.queue = e.queue[:0]
	for k, at := range e.deadlines {
		e.queue = append(e.queue, deadlineItem{at: at, key: k})
	}
	heap.Init(&e.queue)
}

// run is the sweeper: at each deadline it expires the keys that have reached
// theirs, until ctx ends.
func (e *expiry) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		keys, next := e.due(time.Now().UnixMilli())
		if len(keys) > 0 {
			_ = e.sweep(keys) // a key left behind is still expired when it is named
			continue
		}
		wait := time.Hour
		if next > 0 {
			wait = time.Until(time.UnixMilli(next))
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
		}
	}
}

// due takes from the queue the keys whose deadline is at or before now (at most
// a batch) and returns them with the next deadline (0: none).
func (e *expiry) due(now int64) ([]string, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var keys []string
	seen := map[string]bool{}
	for len(e.queue) > 0 && e.queue[0].at <= now && len(keys) < 1000 {
		it := heap.Pop(&e.queue).(deadlineItem)
		if at, ok := e.deadlines[it.key]; ok && at <= now && !seen[it.key] {
			seen[it.key] = true
			keys = append(keys, it.key)
		}
	}
	if len(e.queue) == 0 {
		return keys, 0
	}
	return keys, e.queue[0].at
}

// sweep expires keys, those past their deadline, through the sweeper's
// in-process connection. It returns the store's error.
func (e *expiry) sweep(keys []string) error {
	args := append([]string{"EVAL", sweepScript, strconv.Itoa(len(keys))}, keys...)
	return e.sweeperDo(args...)
}

func (e *expiry) sweeperDo(args ...string) error {
	e.sweepMu.Lock()
	defer e.sweepMu.Unlock()
	e.sweepOut.Reset()
	e.srv.Dispatch(e.sweeper, args)
	_ = e.sweepW.Flush() // to a bytes.Buffer: cannot fail
	if msg, ok := bytes.CutPrefix(e.sweepOut.Bytes(), []byte("-")); ok {
		return fmt.Errorf("%s: %s", strings.ToLower(args[0]), bytes.TrimSpace(msg))
	}
	return nil
}

type deadlineItem struct {
	at  int64
	key string
}

// deadlineQueue is a min-heap of deadlines (container/heap).
type deadlineQueue []deadlineItem

func (q deadlineQueue) Len() int           { return len(q) }
func (q deadlineQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q deadlineQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *deadlineQueue) Push(x any)        { *q = append(*q, x.(deadlineItem)) }
func (q *deadlineQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}
