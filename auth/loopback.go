package auth

import (
	"net"
	"net/netip"
)

// IsLoopback reports whether remoteAddr, an http.Request's RemoteAddr
// ("host:port"), is a loopback address: 127.0.0.0/8, ::1, or 127.0.0.0/8 mapped
// into IPv6 (::ffff:127.0.0.1). Anything unparsable is not.
func IsLoopback(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return addr.Unmap().IsLoopback()
}
