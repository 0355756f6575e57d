package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

// secret is the key that ids of idempotent requests are derived with, the same
// on every replica: Options.Secret, or one made once and kept in Redis (SET NX
// under P:secret), read on first use and kept. Errors: ErrUnavailable.
func (s *Store) secret(ctx context.Context) ([]byte, error) {
	if k := s.secretKey.Load(); k != nil {
		return *k, nil
	}
	if len(s.opt.Secret) > 0 {
		k := s.opt.Secret
		s.secretKey.Store(&k)
		return k, nil
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	key := s.opt.Prefix + ":secret"
	fresh := base64.RawURLEncoding.EncodeToString(b[:])
	if err := s.rdb.SetNX(ctx, key, fresh, 0).Err(); err != nil {
		return nil, s.storeErr("secret", err)
	}
	v, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		return nil, s.storeErr("secret", err)
	}
	k, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(k) < 16 {
		return nil, fmt.Errorf("secret: %s holds no secret Baton made", key)
	}
	s.secretKey.Store(&k)
	return k, nil
}

// derive is an id (URL-safe, 256 bits) that only a holder of the secret can
// compute from its parts.
func derive(secret []byte, parts ...string) string {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// recordHash names an Idempotency-Key's record: the principal and the key.
func recordHash(by, key string) string {
	sum := sha256.Sum256([]byte(by + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

// sessionLease and sessionTicket are the ids of a hold (and of its ticket) asked
// for in a session, derived from the session id and the member's nonce, so that
// Redis holds no id and whoever has the session can find its holds.
func sessionLease(session, nonce string) string {
	sum := sha256.Sum256([]byte("session-lease:" + session + ":" + nonce))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func sessionTicket(session, nonce string) string {
	sum := sha256.Sum256([]byte("session-ticket:" + session + ":" + nonce))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
