package main

import (
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startDebug serves Go's runtime profiles (net/http/pprof) on their own listener,
// BATON_DEBUG_ADDR, so that they are never reachable through the API's port:
// goroutine stacks, heap and CPU profiles tell an operator where time and memory
// go, and let the chaos runner check a process's goroutines from outside
// (chaos/goroutines.go). It returns the server, to be closed at shutdown.
func startDebug(addr string) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and every named profile under it
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln.Addr(), nil
}
