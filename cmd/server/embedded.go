package main

import (
	"context"

	"github.com/alicebob/miniredis/v2"
)

// startEmbedded runs the in-process store (miniredis) for trying Baton out,
// until ctx ends. Keys expire with the wall clock as on Redis, at a cost that
// does not grow with the number of keys (see expiry). It keeps nothing and
// serves one process only.
func startEmbedded(ctx context.Context) (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	if _, err := newExpiry(ctx, m.Server(), ""); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}
