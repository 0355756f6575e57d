package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// testConfig is the default configuration with a free loopback port.
func testConfig() Config {
	return Config{
		Addr: "127.0.0.1:0", KeyPrefix: "baton", DefaultTTL: 30 * time.Second,
		MinTTL: 100 * time.Millisecond, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second,
		TicketTTL: 10 * time.Second, MaxWaiters: 50000, LogLevel: "info", LogFormat: "json",
		ShutdownDelay: 0, ShutdownTimeout: 10 * time.Second, WaitTimeout: 100 * time.Millisecond, FenceGuard: time.Hour,
		IdempotencyGrace: time.Minute, BodyReadTimeout: 10 * time.Second,
		MaxQueuedCalls: 50000, MaxQueueWait: 10 * time.Second,
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe runs serve in-process and returns its base URL and log.
func startServe(t *testing.T, cfg Config) (string, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, zerolog.New(logs), func(a net.Addr) { addr <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a.String(), logs
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	return "", nil
}

// call sends a JSON request and decodes a JSON answer.
func call(t *testing.T, method, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, res.Header, out
}
