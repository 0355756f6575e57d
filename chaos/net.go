package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// netProxy is a toxiproxy run inside this process between the Baton processes and
// Redis: the network faults are toxics added to it and removed again.
// Running it in process, rather than the toxiproxy-server binary, keeps the
// runner one command with nothing to install, and lets a scenario add and remove
// toxics by calling the collection directly instead of through its HTTP API.
type netProxy struct {
	p *toxiproxy.Proxy
}

// startNetProxy starts a proxy on a free loopback port in front of upstream
// (host:port). Its connections are those Baton makes; the runner's own client
// (faults, key checks) goes to Redis directly.
func startNetProxy(upstream string) (*netProxy, error) {
	toxics.Register("hold", new(holdToxic)) // toxiproxy's registry is a map: again is harmless
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start toxiproxy: %w", err)
	}
	return &netProxy{p: p}, nil
}

// url is the Redis URL that goes through the proxy.
func (n *netProxy) url() string { return "redis://" + n.p.Listen }

func (n *netProxy) stop() { n.p.Stop() }

// add adds a toxic of type typ on both streams (requests and replies), named
// after the type and the stream.
func (n *netProxy) add(typ string, attrs map[string]any) error {
	for _, stream := range []string{"upstream", "downstream"} {
		body, err := json.Marshal(map[string]any{"type": typ, "stream": stream, "attributes": attrs})
		if err != nil {
			return err
		}
		if _, err := n.p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
			return fmt.Errorf("add toxic %s %s: %w", typ, stream, err)
		}
	}
	return nil
}

// remove removes the toxics add added. Removing a timeout toxic closes the
// connections it held (toxiproxy's Cleanup), as a peer that gives up would.
func (n *netProxy) remove(typ string) error {
	for _, stream := range []string{"upstream", "downstream"} {
		if err := n.p.Toxics.RemoveToxic(context.Background(), typ+"_"+stream); err != nil {
			return fmt.Errorf("remove toxic %s %s: %w", typ, stream, err)
		}
	}
	return nil
}

// The faults between Baton and Redis. Each holds a toxic on both streams for a
// while, removes it, waits for the service to recover (timed from the removal),
// and leaves the network clean for a while before the next.

// netLatency adds 50ms ± 25ms each way for 4s at a time: renewals and pub/sub
// deliveries come late, and holders of short leases lose some to expiry, which
// the model allows.
func netLatency(ctx context.Context, r *trial) error {
	return netFault(ctx, r, "latency", map[string]any{"latency": 50, "jitter": 25}, 4*time.Second, time.Second)
}

// netReset resets every connection through the proxy, pub/sub included, at its
// next byte, and every new one, for 100ms at a time.
func netReset(ctx context.Context, r *trial) error {
	return netFault(ctx, r, "reset_peer", map[string]any{"timeout": 0}, 100*time.Millisecond, time.Second)
}

// netBlackhole lets nothing through either way for 1s at a time, shorter than
// any lease a holder renews in time; or, long, for three times the longest usual
// lease, so that holders cannot renew and lose their locks to expiry in Redis.
// The connections stay open and what was sent arrives when the hole heals, as
// TCP's retransmissions make it arrive (holdToxic): Redis runs late commands
// whose callers were told 503 long ago, and Baton's pub/sub connection hears of
// the outage only by its own timeouts.
//
// The long black hole needs no Loss in the history: Redis keeps its data and its
// clock, leases end when Redis said they would, and the model already lets a
// lease expire, and an operation whose answer was lost take effect at any point
// after its call.
func netBlackhole(long bool) func(context.Context, *trial) error {
	return func(ctx context.Context, r *trial) error {
		on := time.Second
		if long {
			on = 3 * r.cfg.maxTTL
		}
		return netFault(ctx, r, "hold", nil, on, 2*time.Second)
	}
}

// holdToxic holds every byte, and so the connection, until it is removed; then
// what it held goes on (toxiproxy drains the toxic's input when removing it).
// toxiproxy's own timeout toxic drops the bytes instead and closes the
// connections when removed, so a client would learn of the end of the outage by
// a reset; this one is the black hole nobody is told about.
type holdToxic struct{}

// Pipe reads nothing: the link's reader blocks, and TCP's window stops the sender.
func (*holdToxic) Pipe(stub *toxics.ToxicStub) { <-stub.Interrupt }

// netFault adds the toxic typ for on at a time, off between, until ctx ends.
func netFault(ctx context.Context, r *trial, typ string, attrs map[string]any, on, off time.Duration) error {
	n := r.top.proxy
	if n == nil {
		return fmt.Errorf("%s toxic: the scenario has no proxy (proxied: true)", typ)
	}
	for sleepCtx(ctx, off) {
		added := time.Now()
		if err := n.add(typ, attrs); err != nil {
			return err
		}
		sleepCtx(ctx, on) // the toxic comes off even when ctx ends meanwhile
		if err := n.remove(typ); err != nil {
			return err
		}
		// Latency slows Baton's calls to Redis, but they are answered: only a late
		// watch is excused by it.
		imp := lostRedis
		if typ == "latency" {
			imp = slowed
		}
		r.fault(added, time.Now(), imp, "toxic "+typ)
	}
	return nil
}

// sleepCtx sleeps for d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
