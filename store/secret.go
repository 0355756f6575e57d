package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
)

// The secret ids of idempotent requests are derived with must be the same on
// every replica, or a retry reaching another replica would not find what the
// first request made. It is Options.Secret (BATON_SECRET), whose fingerprint is
// kept in Redis (P:secret:fp, SET NX) so that a replica configured with another
// one notices, fails /readyz and refuses idempotent requests; or, with none,
// one made once and kept in Redis (P:secret, SET NX). A replica writes the one
// it uses back (SET NX) at Ready, every clockEvery and when Redis comes back, so
// that a Redis restarted empty gets the secret replicas already derive with
// rather than a new one; a replica that finds another in Redis adopts it.

// ErrSecretMismatch: BATON_SECRET differs from another replica's.
var ErrSecretMismatch = errors.New("BATON_SECRET differs from the one another replica of this prefix uses (its fingerprint is in Redis): idempotent requests would not find what a retry elsewhere made")

// secret returns the secret, reading or making it on first use. Errors:
// ErrSecretMismatch, ErrUnavailable.
func (s *Store) secret(ctx context.Context) ([]byte, error) {
	if err := s.secretErr.Load(); err != nil {
		return nil, *err
	}
	if k := s.secretKey.Load(); k != nil {
		return *k, nil
	}
	if err := s.syncSecret(ctx); err != nil {
		return nil, err
	}
	if k := s.secretKey.Load(); k != nil {
		return *k, nil
	}
	return nil, fmt.Errorf("secret: %w", ErrUnavailable)
}

// syncSecret makes Redis and this replica agree on the secret (see above).
func (s *Store) syncSecret(ctx context.Context) error {
	if len(s.opt.Secret) > 0 {
		sum := sha256.Sum256(s.opt.Secret)
		fp := hex.EncodeToString(sum[:8])
		key := s.opt.Prefix + ":secret:fp"
		if err := s.rdb.SetNX(ctx, key, fp, 0).Err(); err != nil {
			return s.storeErr("secret", err)
		}
		got, err := s.rdb.Get(ctx, key).Result()
		if err != nil {
			return s.storeErr("secret", err)
		}
		if got != fp {
			err := ErrSecretMismatch
			if s.secretErr.Swap(&err) == nil {
				s.opt.Logger.Error().Msg(err.Error())
			}
			return err
		}
		k := s.opt.Secret
		s.secretKey.Store(&k)
		s.secretErr.Store(nil)
		return nil
	}
	key := s.opt.Prefix + ":secret"
	offer := make([]byte, 32)
	if k := s.secretKey.Load(); k != nil {
		offer = *k // the one this replica derives with: Redis may have lost it
	} else {
		_, _ = rand.Read(offer)
	}
	if err := s.rdb.SetNX(ctx, key, base64.RawURLEncoding.EncodeToString(offer), 0).Err(); err != nil {
		return s.storeErr("secret", err)
	}
	v, err := s.rdb.Get(ctx, key).Result()
	if err != nil {
		return s.storeErr("secret", err)
	}
	k, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(k) < 16 {
		return fmt.Errorf("secret: %s holds no secret Baton made", key)
	}
	if old := s.secretKey.Swap(&k); old != nil && !hmac.Equal(*old, k) {
		s.opt.Logger.Warn().Msg("the idempotency secret in Redis is not the one this replica derived ids with (Redis lost it and another replica made a new one first): adopting it; retries of requests made before may not find them")
	}
	return nil
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

// recordHash names an Idempotency-Key's record: the principal and the key,
// keyed with the secret, so that the name tells nothing of either.
func recordHash(secret []byte, by, key string) string {
	return derive(secret, "record", by, key)[:22]
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
