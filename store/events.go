package store

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"
)

// event is what moves a waiting long-poll on.
type event uint8

const (
	evSignal   event = 1 << iota // the dispatcher woke its waiter: a release, a grant, a re-check
	evDeadline                   // its wait is over
	evShutdown                   // the store shuts down (Shutdown)
	evGone                       // its context ended: the client went away
)

// An eventWait drives one long-poll's wait by its events, not by a goroutine
// blocked in a select: the dispatcher, a timer, the context and the store's
// shutdown each call fire, which starts a goroutine to run step and nothing
// more; that goroutine ends when no event is left. While nothing happens a
// wait holds no goroutine and no stack, only its state (tens of
// thousands of long-polls may be parked). Steps of one wait never overlap: events
// that come during a step are handed to the next one, as a select loop would
// see them once the step is done.
type eventWait struct {
	step func(event) bool // handles the events that came; true once the wait is over
	fail func(error)      // ends the wait with an error: a step panicked

	mu      sync.Mutex
	pending event
	running bool // a step runs, or the wait is still being set up: events wait for it
	over    bool

	timer        *time.Timer
	stopGone     func() bool
	stopShutdown func() bool
}

// newEventWait returns a wait being set up: events that come before start are
// kept for it.
func newEventWait() *eventWait { return &eventWait{running: true} }

// wake is the dispatcher's wake for the wait's waiter. It runs under the
// dispatcher's lock, so it only records the event and starts a goroutine.
func (e *eventWait) wake() { e.fire(evSignal) }

// start arms the deadline (after d), the context and the shutdown, and runs the
// steps already due (the dispatcher wakes a waiter at once when its channel is
// subscribed already) on the calling goroutine: a wait that its first look
// settles has answered when start returns, as the select loop did.
func (e *eventWait) start(s *Store, ctx context.Context, d time.Duration, step func(event) bool, fail func(error)) {
	e.step, e.fail = step, fail
	e.timer = time.AfterFunc(d, func() { e.fire(evDeadline) })
	e.stopGone = context.AfterFunc(ctx, func() { e.fire(evGone) })
	e.stopShutdown = context.AfterFunc(s.stopped, func() { e.fire(evShutdown) })
	e.run()
}

// fire records an event and starts a step for it, unless one runs already.
func (e *eventWait) fire(ev event) {
	e.mu.Lock()
	if e.over {
		e.mu.Unlock()
		return
	}
	e.pending |= ev
	if e.running {
		e.mu.Unlock()
		return
	}
	e.running = true
	e.mu.Unlock()
	go e.runLabelled()
}

// runLabelled is run on a goroutine of its own, labelled as a wait's step
// rather than as its starter (a pub/sub reader, a timer: labels.go).
func (e *eventWait) runLabelled() {
	pprof.SetGoroutineLabels(waitLabels)
	e.run()
}

// run hands the pending events to step until none is left or the wait is over.
func (e *eventWait) run() {
	defer e.recover()
	for {
		e.mu.Lock()
		ev := e.pending
		e.pending = 0
		if ev == 0 || e.over {
			e.running = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		if e.step(ev) {
			return
		}
	}
}

// recover answers a wait whose step panicked with the error the recoverer
// middleware made of a panic in a handler, which ran the wait before: an
// internal error, logged with its stack. A panic in the answer's callback is
// not the wait's to hide.
func (e *eventWait) recover() {
	v := recover()
	if v == nil {
		return
	}
	e.mu.Lock()
	over := e.over
	e.mu.Unlock()
	if over {
		panic(v)
	}
	e.fail(fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
}

// end stops the wait's timer and callbacks: events after it are dropped. A step
// calls it before the wait's answer is handed on.
func (e *eventWait) end() {
	e.mu.Lock()
	e.over = true
	e.mu.Unlock()
	e.timer.Stop()
	e.stopGone()
	e.stopShutdown()
}
