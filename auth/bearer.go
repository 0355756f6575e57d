package auth

import "strings"

// The reasons a request is not authenticated, safe to show its client.
var (
	errNoKey       = &AuthError{Reason: "no key: send Authorization: Bearer <key>"}
	errManyHeaders = &AuthError{Reason: "more than one Authorization header: send exactly one, Bearer <key>"}
	errNotBearer   = &AuthError{Reason: "the Authorization header must be Bearer <key>"}
	errEmptyKey    = &AuthError{Reason: "the Bearer key is empty"}
	errKeyFormat   = &AuthError{Reason: "a key is 32 to 256 visible ASCII characters"}
	errUnknownKey  = &AuthError{Reason: "the key is not valid"}
	// A certificate whose CN is one key's cert_cn and a URI another's
	// cert_uri: the keys file must say who it is.
	errCertAmbiguous = &AuthError{Reason: "the client certificate matches more than one key (cert_cn and cert_uri of different keys): send Authorization: Bearer <key>, or fix the keys file"}
)

// bearerToken returns the key of an Authorization header, given all its values.
// The scheme is case-insensitive (RFC 9110) and followed by one or more spaces;
// the key is 32 to 256 visible ASCII characters. Longer input is refused before
// it is looked at.
func bearerToken(vals []string) (string, error) {
	if len(vals) != 1 {
		return "", errManyHeaders
	}
	v := vals[0]
	scheme, key, found := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", errNotBearer
	}
	if !found {
		return "", errEmptyKey
	}
	key = strings.TrimLeft(key, " ")
	switch {
	case key == "":
		return "", errEmptyKey
	case len(key) < minKeyLen || len(key) > maxKeyLen:
		return "", errKeyFormat
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return "", errKeyFormat
		}
	}
	return key, nil
}
