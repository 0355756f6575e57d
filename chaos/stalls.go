package main

import (
	"sync"
	"time"

	"github.com/batonhq/baton/chaos/check"
)

// stallMeter measures how long this process was left without a CPU: a
// goroutine that sleeps stallTick again and again, and records every wake-up
// that came more than stallMin late as a stall. On a loaded 2-CPU machine (the
// workload's clients, two Baton processes and Redis share it, and so do other
// people's tests) a runnable goroutine can wait hundreds of milliseconds; a
// watch's return is then recorded that much late, and the Baton processes,
// starved by the same load, answer late too. check.Watches subtracts the stalls
// from a watch's lag.
type stallMeter struct {
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	stalls []check.Span
}

const (
	stallTick = 2 * time.Millisecond
	stallMin  = 5 * time.Millisecond
)

func startStallMeter() *stallMeter {
	m := &stallMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *stallMeter) run() {
	defer close(m.done)
	t := time.NewTimer(stallTick)
	defer t.Stop()
	for last := time.Now(); ; {
		select {
		case <-m.stop:
			return
		case <-t.C:
			now := time.Now()
			if due := last.Add(stallTick); now.Sub(due) > stallMin {
				m.mu.Lock()
				m.stalls = append(m.stalls, check.Span{From: due, To: now, What: "the runner had no CPU"})
				m.mu.Unlock()
			}
			last = time.Now()
			t.Reset(stallTick)
		}
	}
}

// close stops the meter and returns the stalls it saw.
func (m *stallMeter) close() []check.Span {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stalls
}
