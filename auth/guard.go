package auth

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// Mode is how a Guard decides who a request is.
type Mode int

// The three modes of API.md, "Access control".
const (
	ModeProtected Mode = iota // no BATON_AUTH_FILE: loopback clients only, every right
	ModeKeys                  // BATON_AUTH_FILE: a valid key (or client certificate), within its grants
	ModeOff                   // BATON_AUTH=off: everyone, every right
)

func (m Mode) String() string {
	switch m {
	case ModeProtected:
		return "protected"
	case ModeKeys:
		return "keys"
	case ModeOff:
		return "off"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Counter is what the Guard counts reload errors on: a prometheus.Counter
// (baton_auth_reload_errors_total) fits.
type Counter interface{ Inc() }

// Config chooses the mode; cmd/server fills it from the environment.
type Config struct {
	File         string         // BATON_AUTH_FILE: the keys file; empty for no keys
	Auth         string         // BATON_AUTH: "off", or empty
	Logger       zerolog.Logger // reloads, their errors, and the start warnings
	ReloadErrors Counter        // counts failed reloads; may be nil
	// KeyMaxWaiters is the max_waiters of a key that sets none
	// (BATON_KEY_MAX_WAITERS), so that no key can take every long-poll a
	// process allows (BATON_MAX_WAITERS) from the others; 0: no limit.
	KeyMaxWaiters int
	// KeyCaps are the caps on live objects of a key that sets none of its own
	// (BATON_KEY_MAX_HOLDS, BATON_KEY_MAX_TICKETS, BATON_KEY_MAX_SESSIONS);
	// 0: none.
	KeyCaps Caps
	// BuiltinCaps are the caps of protected and off mode's principal, which
	// every client of those modes shares; 0: none.
	BuiltinCaps Caps
}

// Guard authenticates requests in one of the three modes. It is safe for
// concurrent use; Reload swaps its keys atomically.
type Guard struct {
	mode       Mode
	file       string
	keyWaiters int  // Config.KeyMaxWaiters
	keyCaps    Caps // Config.KeyCaps
	// loopback and anyone are the built-in principals with Config.BuiltinCaps.
	loopback, anyone *Principal
	log              zerolog.Logger
	errs             Counter
	ring             atomic.Pointer[keyring]
	mu               sync.Mutex // serialises reloads
	lastSig          fileSig    // the file as the last reload found it; under mu
	pending          *fileSig   // a change Watch saw, loaded if the next look sees it too; under mu
}

// NewGuard returns a Guard for c, having read the keys file when there is one,
// and logs a warning for protected and off mode. It returns an error when
// c.Auth is neither empty nor "off", when both a file and "off" are given, and
// the keys file's errors (as ReadKeys) when it cannot be used: at start a bad
// file is fatal.
func NewGuard(c Config) (*Guard, error) {
	g := &Guard{file: c.File, log: c.Logger, errs: c.ReloadErrors, keyWaiters: max(0, c.KeyMaxWaiters), keyCaps: c.KeyCaps,
		loopback: loopback.withCaps(c.BuiltinCaps), anyone: anyone.withCaps(c.BuiltinCaps)}
	switch {
	case c.Auth != "" && c.Auth != "off":
		return nil, fmt.Errorf("BATON_AUTH=%q: the only value is off (leave it unset to use BATON_AUTH_FILE or protected mode)", c.Auth)
	case c.Auth == "off" && c.File != "":
		return nil, errors.New("BATON_AUTH_FILE and BATON_AUTH=off are both set: choose keys or no access control")
	case c.Auth == "off":
		g.mode = ModeOff
		g.log.Warn().Str("auth", "off").Msg("access control is off (BATON_AUTH=off): every client that reaches this port may take, watch and force-release every lock")
		return g, nil
	case c.File == "":
		g.mode = ModeProtected
		g.log.Warn().Str("auth", "protected").Msg("protected mode: only programs on this host are served (a loopback TCP peer and Host, " +
			"nothing a proxy adds, no web page of another origin). Set BATON_AUTH_FILE to a keys file to serve others")
		return g, nil
	}
	g.mode = ModeKeys
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.load(); err != nil {
		return nil, err
	}
	return g, nil
}

// Mode returns the Guard's mode.
func (g *Guard) Mode() Mode { return g.mode }

// Authenticate returns the principal a request acts for. In off mode that is
// Anyone(). In protected mode it is Loopback() when the TCP peer (r.RemoteAddr,
// never X-Forwarded-For) is a loopback address (else ErrNotLoopback), the
// request carries no header a proxy adds (Forwarded, X-Forwarded-For,
// X-Forwarded-Host, X-Real-IP, Via), its Host is a loopback name
// ([LoopbackHost]), and no browser sent it for a page of another origin (an
// Origin other than the server's own, or Sec-Fetch-Site: cross-site). In keys
// mode it is the key of the Authorization: Bearer header when the request has
// one, and otherwise the key its verified client certificate maps to (cert_cn
// or cert_uri), unless a browser sent it for a page of another origin. Every
// failure is an *AuthError matching ErrUnauthorized whose message is safe to
// show; an unknown key and a removed one get the same answer, found in the
// same time.
func (g *Guard) Authenticate(r *http.Request) (*Principal, error) {
	switch g.mode {
	case ModeOff:
		return g.anyone, nil
	case ModeProtected:
		if !IsLoopback(r.RemoteAddr) {
			return nil, ErrNotLoopback
		}
		if err := checkProtected(r); err != nil {
			return nil, err
		}
		return g.loopback, nil
	}
	ring := g.ring.Load()
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		p, ambiguous := ring.byCert(r.TLS)
		if ambiguous {
			return nil, errCertAmbiguous
		}
		if p != nil {
			// A browser presents its client certificate to any page's
			// request: that is ambient authority, like a cookie.
			if err := checkBrowser(r); err != nil {
				return nil, err
			}
			return p, nil
		}
		return nil, errNoKey
	}
	key, err := bearerToken(vals)
	if err != nil {
		return nil, err
	}
	return ring.byKey(key)
}

// Lookup returns the principal of the keys file named name, or nil: for tests
// and admin tools, never for authentication.
func (g *Guard) Lookup(name string) *Principal {
	if ring := g.ring.Load(); ring != nil {
		return ring.byName[name]
	}
	return nil
}
