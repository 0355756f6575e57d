package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A step that panics ends its wait with an internal error, as the recoverer
// middleware answered a panic in a handler that ran the wait on its own
// goroutine: steps now run on goroutines of their own, where a panic would end
// the process.
func TestPanickingStepFailsTheWait(t *testing.T) {
	s := &Store{stopped: context.Background()}
	e := newEventWait()
	failed := make(chan error, 1)
	steps := 0
	e.start(s, context.Background(), time.Hour, func(event) bool {
		steps++
		panic("boom")
	}, func(err error) { e.end(); failed <- err })
	e.wake() // the first step, on a goroutine of its own
	select {
	case err := <-failed:
		if !strings.Contains(err.Error(), "panic: boom") {
			t.Fatalf("wait failed with %v, want the panic", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a panicking step did not end its wait")
	}
	e.wake() // over: dropped
	if steps != 1 {
		t.Fatalf("%d steps ran, want 1", steps)
	}
}
