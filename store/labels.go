package store

import (
	"context"
	"runtime/pprof"
)

// The store's goroutines carry profiler labels (runtime/pprof), key "baton":
// a goroutine profile shows them (debug=1; debug=2 too when the process runs
// with GODEBUG=tracebacklabels=1), so that a reader of one, chaos's leak check
// among them, can tell a pub/sub link's reader and writer, which live as long
// as the link, from a goroutine left behind. A goroutine inherits its
// starter's labels: one the store starts for a short job from a labelled
// goroutine sets labels of its own (the wait steps, waitLabels).
const (
	labelKey        = "baton"
	labelLinkReader = "pubsub-reader" // dispatcher.receive, one per link
	labelLinkWriter = "pubsub-writer" // dispatcher.write, one per link
	labelClock      = "clock"         // Store.runClock
	labelAdmission  = "admission"     // the admission's shutdown watch
	labelWait       = "wait-step"     // eventWait.run
)

// goLabelled runs f on a goroutine of its own labelled baton=value.
func goLabelled(value string, f func()) {
	go pprof.Do(context.Background(), pprof.Labels(labelKey, value), func(context.Context) { f() })
}

// waitLabels is the labels of a wait's steps, made once: a step sets them
// with no allocation (pprof.SetGoroutineLabels).
var waitLabels = pprof.WithLabels(context.Background(), pprof.Labels(labelKey, labelWait))
