package redisconn

import (
	"context"
	"errors"
	"net"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gate keeps requests away from a Redis that is down, and lets them through
// the moment it answers again.
//
// Without it, a Redis that dies makes every request dial and fail (each taking
// its turn at the dial), and go-redis's pool, after as many failed dials as it
// has connections, stops dialing and fails fast until a background probe,
// once a second, succeeds: answers stay 503 for up to a second after Redis is
// back. With it, the first connection error closes the gate: calls answer
// ErrUnavailable at once without touching the pool, a prober pings Redis every
// gateProbeEvery through a client of its own (a fresh one each time, so no
// breaker of go-redis's holds it back), and the first pong opens the gate.
// Dials that do reach the pool while the gate is closed (a call that passed it
// just before it closed, the pool's own probe) wait for it to open, up to their
// deadline, rather than fail: they are the failures that would open go-redis's
// breaker.
type Gate struct {
	probe func() (redis.UniversalClient, error) // a fresh client to ping with

	mu     sync.Mutex
	down   bool
	onOpen []func()
	opens  chan struct{} // closed when the gate opens again
	stop   chan struct{}
}

// gateProbeEvery is how often a closed gate pings Redis.
const gateProbeEvery = 10 * time.Millisecond

// NewGate returns an open gate for the Redis at rawURL (any URL NewClient takes).
func NewGate(rawURL string) *Gate {
	return &Gate{
		probe: func() (redis.UniversalClient, error) { return newClient(rawURL, nil) },
		stop:  make(chan struct{}),
	}
}

// Down reports whether the gate is closed.
func (g *Gate) Down() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// MarkDown shuts the gate and starts probing, unless it is closed already.
func (g *Gate) MarkDown() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		return
	}
	select {
	case <-g.stop:
		return
	default:
	}
	g.down = true
	g.opens = make(chan struct{})
	opens := g.opens
	// Labelled for goroutine profiles, as the store labels its own.
	go pprof.Do(context.Background(), pprof.Labels("baton", "gate-probe"), func(context.Context) { g.probeUntilUp(opens) })
}

// probeUntilUp pings Redis until it answers, then opens the gate.
func (g *Gate) probeUntilUp(opens chan struct{}) {
	t := time.NewTicker(gateProbeEvery)
	defer t.Stop()
	for {
		if g.ping() {
			g.mu.Lock()
			g.down = false
			close(opens)
			hooks := g.onOpen
			g.mu.Unlock()
			for _, f := range hooks {
				go f()
			}
			return
		}
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
	}
}

func (g *Gate) ping() bool {
	c, err := g.probe()
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}

// wait blocks while the gate is closed, until it opens, ctx ends or the gate
// is stopped (Close). A pub/sub connection redials with no deadline, holding
// go-redis's lock on it, so without the last a store closed while Redis is
// down would wait for Redis for ever.
func (g *Gate) wait(ctx context.Context) error {
	g.mu.Lock()
	down, opens := g.down, g.opens
	g.mu.Unlock()
	if !down {
		return nil
	}
	select {
	case <-opens:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stop:
		return errGateStopped
	}
}

// errGateStopped: a dial waited in a gate that was stopped.
var errGateStopped = errors.New("redis is down and the store is closing")

// OnOpen has f run (in a goroutine of its own) whenever the gate opens again.
func (g *Gate) OnOpen(f func()) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.onOpen = append(g.onOpen, f)
}

// Close stops the prober.
func (g *Gate) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
}

// dialer wraps a go-redis dialer: while the gate is closed, a dial waits for it.
func (g *Gate) dialer(base func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := g.wait(ctx); err != nil {
			return nil, err
		}
		return base(ctx, network, addr)
	}
}
