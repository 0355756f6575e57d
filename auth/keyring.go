package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
)

// keyring is one version of the keys file, ready for lookups. A reload builds a
// new one and swaps it in whole.
type keyring struct {
	keys   []Key // as the file gave them
	byHash map[[sha256.Size]byte]*entry
	byCN   map[string]*Principal
	byURI  map[string]*Principal
	byName map[string]*Principal
}

// entry is a key's principal beside the hash that names it.
type entry struct {
	sum [sha256.Size]byte
	p   *Principal
}

// decoy stands in for a missing key, so that a miss does the same comparison as
// a hit.
var decoy = &entry{}

// newKeyring builds the lookups for keys, carrying over the runtime state of
// every name old (nil at start) also has. A key without max_waiters gets
// defWaiters (0: none), and each cap it leaves out defCaps's.
func newKeyring(keys []Key, old *keyring, defWaiters int, defCaps Caps) *keyring {
	ring := &keyring{
		keys:   keys,
		byHash: make(map[[sha256.Size]byte]*entry, len(keys)),
		byCN:   make(map[string]*Principal),
		byURI:  make(map[string]*Principal),
		byName: make(map[string]*Principal, len(keys)),
	}
	for _, k := range keys {
		rt := newRuntime()
		if old != nil {
			if prev := old.byName[k.Name]; prev != nil {
				rt = prev.rt
			}
		}
		byDefault := k.MaxWaiters == 0 && defWaiters > 0
		if byDefault {
			k.MaxWaiters = defWaiters
		}
		p := newPrincipal(k, rt, defCaps)
		p.waitersByDefault = byDefault
		ring.byName[k.Name] = p
		if k.CertCN != "" {
			ring.byCN[k.CertCN] = p
			continue
		}
		if k.CertURI != "" {
			ring.byURI[k.CertURI] = p
			continue
		}
		e := &entry{p: p}
		hex.Decode(e.sum[:], []byte(k.SHA256)) // validated by the parser
		ring.byHash[e.sum] = e
	}
	return ring
}

// byKey returns the principal of a key. Only the key's SHA-256 is looked up, so
// the map's timing depends on the hash, not on how much of a real key a guess
// shares; the final comparison is constant-time and runs on a miss too.
func (ring *keyring) byKey(key string) (*Principal, error) {
	sum := sha256.Sum256([]byte(key))
	e, ok := ring.byHash[sum]
	if !ok {
		e = decoy
	}
	if subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 || !ok {
		return nil, errUnknownKey
	}
	return e.p, nil
}

// byCert returns the principal a verified client certificate maps to: the
// key whose cert_cn is its common name, or whose cert_uri is one of its URI
// subject alternative names; nil when none does, or when it maps to more than
// one key (ambiguous is then true). An unverified certificate counts for
// nothing.
func (ring *keyring) byCert(cs *tls.ConnectionState) (p *Principal, ambiguous bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, false
	}
	leaf := cs.VerifiedChains[0][0]
	found := ring.byCN[leaf.Subject.CommonName]
	for _, u := range leaf.URIs {
		q := ring.byURI[u.String()]
		switch {
		case q == nil || q == found:
		case found == nil:
			found = q
		default:
			return nil, true
		}
	}
	return found, false
}
