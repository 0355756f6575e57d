package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	mrand "math/rand/v2"
)

// newID returns a URL-safe id with 128 bits from crypto/rand: a bearer secret.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error since Go 1.24
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tag returns a URL-safe id of 64 random bits that is no secret: a request's
// maker id, a poll's id. Unique enough to tell a process's requests apart.
func tag() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], mrand.Uint64())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// hashID is what Redis stores in place of a lease, ticket or session id: its
// SHA-256, the first 128 bits of it in base64url.
func hashID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// ticketLease derives the lease id a ticket is granted under, so that the release
// script can grant the lock to a ticket knowing only hashes, and any gateway that
// serves the ticket's next poll can give the client its lease id without Redis ever
// holding a secret.
func ticketLease(ticket string) string { return subID(ticket, "lease") }

// subID is an id derived from base for one use: as secret as base, and
// telling nothing of it.
func subID(base, use string) string {
	sum := sha256.Sum256([]byte(use + ":" + base))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// plausibleID reports whether s could be an id this package issued. Anything else
// cannot be held or queued, so it is answered without a Redis call.
func plausibleID(s string) bool {
	if len(s) < 22 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
