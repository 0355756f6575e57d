package auth

import (
	"net/http"
	"net/netip"
	"strings"
)

// Protected mode trusts a loopback peer with every right, so it must be sure
// the request comes from a program on this host that meant to call Baton. A
// loopback peer alone does not say so:
//
//   - a web page in a browser on this host reaches loopback too. Through DNS
//     rebinding it calls Baton by the attacker's host name; from another origin
//     it sends Origin (and Sec-Fetch-Site), and a body without a Content-Type
//     needs no CORS preflight.
//   - a proxy or sidecar on this host (nginx, HAProxy, Envoy in a service mesh,
//     which delivers inbound traffic from 127.0.0.6) makes every client it
//     forwards a loopback peer.
//
// So protected mode also requires a loopback Host, no Origin but Baton's own,
// no Sec-Fetch-Site: cross-site, and no header a proxy adds. A proxy that adds
// none of them and keeps a loopback Host still passes: the README says to run
// keys mode behind any proxy.

// proxyHeaders are the headers proxies add to what they forward (RFC 7239,
// the de-facto X-Forwarded-* and X-Real-IP, RFC 9110's Via), canonical.
var proxyHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Via"}

// The refusals of protected mode beyond ErrNotLoopback; each says what to do.
var (
	errProxied = &AuthError{Reason: "this request came through a proxy (it carries Forwarded, X-Forwarded-For, X-Forwarded-Host, " +
		"X-Real-IP or Via): protected mode serves only programs on this host that connect to Baton directly, and cannot tell " +
		"who is behind a proxy. Give each client a key: set BATON_AUTH_FILE to a keys file (make keys with `baton keygen NAME`) " +
		"and send Authorization: Bearer <key> through the proxy"}
	errHost = &AuthError{Reason: "protected mode serves only requests addressed to a loopback name: Host must be localhost, " +
		"127.0.0.1 or [::1] (with any port). A web page that reached this port through DNS rebinding sends its own host name. " +
		"To serve clients that call Baton by another name, set BATON_AUTH_FILE to a keys file (make keys with `baton keygen NAME`)"}
	errOrigin = &AuthError{Reason: "requests sent by a web page of another origin (an Origin header other than this server's, " +
		"or Sec-Fetch-Site: cross-site) are refused: only Baton's own dashboard may call it from a browser. Programs send no Origin"}
)

// checkProtected returns nil when a request from a loopback peer may be served
// in protected mode, and otherwise the reason, an *AuthError.
func checkProtected(r *http.Request) error {
	for _, h := range proxyHeaders {
		if _, ok := r.Header[h]; ok {
			return errProxied
		}
	}
	if !LoopbackHost(r.Host) {
		return errHost
	}
	return checkBrowser(r)
}

// checkBrowser refuses a request that a browser sent on behalf of a page of
// another origin: one with an Origin other than the server's own (the scheme
// of the connection and the request's Host), or Sec-Fetch-Site: cross-site.
// Browsers send Origin on every POST, PATCH and DELETE and on cross-origin
// requests; programs send neither header.
func checkBrowser(r *http.Request) error {
	if strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
		return errOrigin
	}
	vals, ok := r.Header["Origin"]
	if !ok {
		return nil
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if len(vals) != 1 || !strings.EqualFold(vals[0], scheme+r.Host) {
		return errOrigin
	}
	return nil
}

// LoopbackHost reports whether host, a request's Host ("name", "name:port",
// "[v6]" or "[v6]:port"), names this host by a loopback name: localhost (any
// case, one trailing dot allowed) or a loopback address (127.0.0.0/8, [::1],
// and 127.0.0.0/8 mapped into IPv6), with or without a port. An empty Host,
// an IPv6 address without brackets and one with a zone are not.
func LoopbackHost(host string) bool {
	name, port := host, ""
	bracketed := strings.HasPrefix(host, "[")
	if bracketed {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return false
		}
		name, port = host[1:end], host[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 {
		name, port = host[:i], host[i+1:]
		if strings.Contains(name, ":") {
			return false
		}
	}
	if !validPort(port) {
		return false
	}
	if !bracketed && strings.EqualFold(strings.TrimSuffix(name, "."), "localhost") {
		return true
	}
	if strings.Contains(name, "%") { // a zone: "[::1%eth0]" is no Host a client means
		return false
	}
	addr, err := netip.ParseAddr(name)
	return err == nil && addr.Is6() == bracketed && addr.Unmap().IsLoopback() // brackets hold IPv6 only (RFC 3986)
}

// validPort reports whether s is empty (RFC 3986 allows "host:") or 1 to 5
// digits.
func validPort(s string) bool {
	if len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
