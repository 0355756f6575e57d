package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

// The bounds of a key's length (API.md, "Keys").
const (
	minKeyLen = 32
	maxKeyLen = 256
)

// keyPrefix starts every key NewKey makes, so that a key is recognisable in a
// config file or a leak scanner.
const keyPrefix = "bk_"

// NewKey returns a new key: "bk_" and 43 base64url characters of 256 bits from
// crypto/rand.
func NewKey() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// KeySHA256 returns the hex SHA-256 of a key, as its sha256 field holds it.
func KeySHA256(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
