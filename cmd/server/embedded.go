package main

import (
	"context"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// startEmbedded runs the in-process store (miniredis) for trying Baton out. Its
// clock only moves when told, so a ticker moves it with the wall clock and leases
// expire as they would on Redis. It keeps nothing and serves one process only.
func startEmbedded(ctx context.Context) (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return m, nil
}
