// Package embedded is the in-process Redis (miniredis) that Baton's server
// runs when no Redis is configured, for trying Baton out: it keeps nothing and
// serves one process only. It expires keys with the wall clock as Redis does
// (expiry.go) and refuses what Baton's scripts could not rely on.
package embedded

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// Redis is the in-process store (miniredis) for trying Baton out. It keeps
// nothing and serves one process only.
type Redis struct {
	*miniredis.Miniredis
	password string
	expiry   *expiry
}

// Start runs the embedded store until ctx ends (or Close). Keys expire
// with the wall clock as on Redis, at a cost that does not grow with the number
// of keys (see expiry). Its loopback port can be reached by every local user,
// so it requires a password, random on each start, that only this process
// knows: it is in URL and nowhere else, and must never be logged. It returns an
// error when the store cannot start.
func Start(ctx context.Context) (*Redis, error) {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	e := &Redis{Miniredis: miniredis.NewMiniRedis(), password: base64.RawURLEncoding.EncodeToString(secret)}
	e.RequireAuth(e.password)
	if err := e.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	var err error
	if e.expiry, err = newExpiry(ctx, e.Server(), e.password); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// URL is the redis:// URL Baton connects with, password included.
func (e *Redis) URL() string {
	return fmt.Sprintf("redis://:%s@%s", e.password, e.Addr())
}
