package main

import (
	"crypto/tls"
	"net"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/park"
)

// startLot starts the lot where waiting long-polls park their connections
// (package park), with the server's idle and write timeouts. It returns nil,
// and every long-poll stays on net/http's goroutine, where parking is
// unsupported (not Linux) or turned off (BATON_PARK=off).
func startLot(cfg Config, srv *http.Server, log zerolog.Logger) *park.Lot {
	if cfg.Park == "off" {
		return nil
	}
	lot, err := park.New(park.Config{IdleTimeout: srv.IdleTimeout, WriteTimeout: srv.WriteTimeout})
	if err != nil {
		log.Warn().Err(err).Msg("long-polls will not park: each keeps its connection's goroutine and buffers while it waits")
		return nil
	}
	return lot
}

// listener is what srv serves on: ln, inside TLS when srv.TLSConfig is set,
// inside the lot when there is one. The lot must see the TLS connections, so
// that a connection it hands back is the *tls.Conn, its handshake done: so TLS
// is set up here as ServeTLS would (HTTP/2 and HTTP/1.1 offered by ALPN, the
// certificate from the configuration, re-read when it changes).
func listener(ln net.Listener, srv *http.Server, lot *park.Lot) net.Listener {
	if srv.TLSConfig != nil {
		srv.TLSConfig = srv.TLSConfig.Clone()
		srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"} // and Serve configures HTTP/2 for "h2"
		ln = tls.NewListener(ln, srv.TLSConfig.Clone())
	}
	if lot != nil {
		ln = lot.Listen(ln)
	}
	return ln
}
