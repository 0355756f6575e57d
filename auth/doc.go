// Package auth is Baton's access control (API.md, "Access control" and "TLS"):
// the keys file (YAML or JSON) and its validation, glob grants over lock names,
// the three modes (protected, keys, off), authentication by Bearer key, client
// certificate or loopback peer, reload on change, per-principal rate limits and
// long-poll quotas, TLS with certificate rotation, and key generation.
//
// The HTTP layer calls [Guard.Authenticate] once per request and works with the
// [Principal] it returns; it never sees a key. The store sees only
// [Principal.ID]. Nothing here writes an HTTP response: failures are errors
// matching [ErrUnauthorized] (401, with [Challenge]) or [ErrForbidden] (403),
// whose messages are safe to show a client.
//
// Keys are secrets: no function in this package logs or returns one (but
// [NewKey]), and no error message repeats a value from a keys file that could be
// a key (32 or more visible characters in a row).
//
// Choices where the contract is silent:
//
//   - A file whose name ends in .json is read as JSON, any other as YAML (which
//     reads most JSON too). Both give errors with lines. YAML anchors and aliases
//     work (to share an allow list); merge keys (<<) do not. "keys: []" is valid
//     and refuses everyone (a warning is logged); a file with no keys list is not.
//   - With both an Authorization header and a verified client certificate, the
//     header decides: a client that sends a key means to act as that key.
//   - The built-in principals are named "@loopback" and "@anyone", which no key
//     can be, so holds made in one mode never belong to a key of another.
//   - A key's rate limiter and long-poll count belong to its name: rotating the
//     key (a new sha256 under the same name) or changing its limits keeps them.
//   - rate_per_s may be fractional (0.5: one request every two seconds, burst 1);
//     burst is twice the rate, at least 1. It is at most 1e9; max_waiters at most 1e9.
//   - The client CA file is read once at start; the certificate and key are
//     watched. Changing CAs is rare and a restart is the safe moment for it.
package auth
