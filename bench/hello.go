package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/batonhq/baton/internal/redistest"
)

// The hello system is the HTTP floor of this machine: a minimal net/http server
// that answers the two routes of a Baton pair (POST a lock, DELETE its lease)
// with fixed bodies and does nothing else. It runs in a process of its own (this
// program, run with helloFlag), pinned with the serving side like Baton, and is
// driven by the same client, so that its server CPU per pair is what two requests
// cost net/http before any work.
const helloFlag = "-hello-server"

var (
	helloLease    = []byte(`{"name":"hello","lease":"hello","fence":1,"count":1,"ttl_ms":30000}`)
	helloReleased = []byte(`{"name":"hello","count":0,"released":true}`)
)

// helloHandler reads each request's body and answers with a fixed one.
func helloHandler() http.Handler {
	reply := func(status int, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(body)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/locks/{name}", reply(http.StatusCreated, helloLease))
	mux.Handle("DELETE /v1/locks/{name}/leases/{lease}", reply(http.StatusOK, helloReleased))
	mux.Handle("GET /readyz", reply(http.StatusOK, []byte(`{"status":"ready"}`)))
	return mux
}

// helloServer is the hello process's main: it serves on the address it is given.
func helloServer(args []string) error {
	if len(args) != 1 {
		return errors.New("want the address to listen on")
	}
	srv := &http.Server{Addr: args[0], Handler: helloHandler(), ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// startHello starts the hello process on a free port, pinned with the serving
// side, and waits until it answers.
func (e *env) startHello(ctx context.Context) (*proc, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	port, err := redistest.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := startProc(e.dir, sysHello, e.pinned, nil, exe, helloFlag, addr)
	if err != nil {
		return nil, "", err
	}
	url := "http://" + addr
	if err := waitHTTP(ctx, p, url+"/readyz", nil); err != nil {
		p.stop(time.Second)
		return nil, "", err
	}
	return p, url, nil
}
