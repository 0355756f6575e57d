package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startDebug serves Go's runtime profiles (net/http/pprof) on their own listener,
// BATON_DEBUG_ADDR, so that they are never reachable through the API's port:
// goroutine stacks, heap and CPU profiles tell an operator where time and memory
// go, and let the chaos runner check a process's goroutines from outside
// (chaos/goroutines.go). They need no key, so the address must be a loopback
// one unless anyRemote (BATON_DEBUG_ALLOW_REMOTE): a name such as localhost
// is checked again once bound. It returns the server, to be closed at
// shutdown.
func startDebug(addr string, anyRemote bool) (*http.Server, net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !anyRemote && !tcp.IP.IsLoopback() {
		ln.Close()
		return nil, nil, fmt.Errorf("%s is bound to %s, not a loopback address (set BATON_DEBUG_ALLOW_REMOTE=true to allow it)", addr, tcp.IP)
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
