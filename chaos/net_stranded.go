package main

import (
	"context"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
)

// netStranded strands every connection Baton has open to Redis, pub/sub
// included, while new connections go through: as when the peer vanished without
// a FIN or a middlebox forgot the flows. Writes to a stranded connection still
// succeed (the kernel takes them) and nothing ever comes back. Recovery is timed
// from the fault's start, since a new connection works at once; a client that
// only waits for an answer on the old one never recovers. Once recovered, and a
// second later, the toxic comes off (what the strands held goes on, to peers
// that have mostly closed them), and the next strand follows 2s on.
func netStranded(ctx context.Context, r *trial) error {
	toxics.Register("strand", new(strandToxic))
	n := r.top.proxy
	for sleepCtx(ctx, 2*time.Second) {
		at := time.Now()
		if err := n.add("strand", map[string]any{"until": at.Add(strandWindow).UnixNano()}); err != nil {
			return err
		}
		r.fault(at, at, lostRedis, "connections stranded")
		sleepCtx(ctx, time.Second) // the toxic comes off even when ctx ends meanwhile
		if err := n.remove("strand"); err != nil {
			return err
		}
		// Until then, what Baton sent on a stranded connection (an undo among
		// them) is held: it arrives now.
		r.span(at, time.Now(), lostRedis, "connections stranded")
	}
	return nil
}

// strandWindow is how long after the toxic is added a link's toxic may start and
// still count as one of the links open then: toxiproxy starts each link's toxics
// in a goroutine of their own. A connection made in that window is stranded too.
const strandWindow = 100 * time.Millisecond

// strandToxic holds the bytes of links whose toxic started before Until (unix
// ns), until it is removed, and passes the bytes of later links.
type strandToxic struct {
	Until int64 `json:"until"`
}

func (t *strandToxic) Pipe(stub *toxics.ToxicStub) {
	if time.Now().UnixNano() < t.Until {
		<-stub.Interrupt
		return
	}
	new(toxics.NoopToxic).Pipe(stub)
}
