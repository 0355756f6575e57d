package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/internal/redistest"
)

// BATON_DEBUG_ADDR serves the runtime profiles on a listener of their own; the
// API's port never serves them, and without the setting nothing listens for them.
func TestDebugListener(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.RedisURL, cfg.DebugAddr = rs.URL(), "127.0.0.1:0"
	base, logs := startServe(t, cfg)
	debug := logAddr(t, logs.String(), "debug listening")
	if debug == "" {
		t.Fatalf("no debug listening line in the log:\n%s", logs)
	}

	st, body := get(t, "http://"+debug+"/debug/pprof/goroutine?debug=2")
	if st != http.StatusOK || !strings.Contains(body, "goroutine ") || !strings.Contains(body, "store.(*dispatcher)") {
		t.Fatalf("goroutine stacks: %d\n%.500s", st, body)
	}
	if st, _ := get(t, base+"/debug/pprof/goroutine?debug=2"); st != http.StatusNotFound {
		t.Fatalf("API port serves /debug/pprof: %d, want 404", st)
	}

	cfg.DebugAddr = ""
	_, logs = startServe(t, cfg)
	if logAddr(t, logs.String(), "debug listening") != "" {
		t.Fatalf("debug listener without BATON_DEBUG_ADDR:\n%s", logs)
	}
}

func TestDebugListenerBadAddr(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.RedisURL, cfg.DebugAddr = rs.URL(), "127.0.0.1:notaport"
	err := serve(t.Context(), cfg, zerolog.Nop(), nil)
	if err == nil || !strings.Contains(err.Error(), "BATON_DEBUG_ADDR") {
		t.Fatalf("serve with a bad BATON_DEBUG_ADDR: %v", err)
	}
}

// logAddr is the addr of the first log line with message msg; "" if none.
func logAddr(t *testing.T, logs, msg string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var l struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == msg {
			return l.Addr
		}
	}
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The runtime profiles need no key: bound anywhere but loopback they are
// refused unless BATON_DEBUG_ALLOW_REMOTE says so.
func TestDebugListenerOnlyOnLoopback(t *testing.T) {
	rs := redistest.Start(t)
	cfg := testConfig()
	cfg.RedisURL, cfg.DebugAddr = rs.URL(), "0.0.0.0:0"
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "BATON_DEBUG_ALLOW_REMOTE") {
		t.Errorf("validate: %v, want BATON_DEBUG_ADDR on every interface refused", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // were it to serve
	defer cancel()
	err := serve(ctx, cfg, zerolog.Nop(), nil)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("serve with BATON_DEBUG_ADDR=0.0.0.0:0: %v, want it refused", err)
	}
	cfg.DebugAllowRemote = true
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	_, logs := startServe(t, cfg)
	if logAddr(t, logs.String(), "debug listening") == "" {
		t.Fatalf("BATON_DEBUG_ALLOW_REMOTE=true: no debug listener:\n%s", logs)
	}
}
