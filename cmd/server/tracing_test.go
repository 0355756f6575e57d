package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/redistest"
)

func TestTracingWanted(t *testing.T) {
	tests := []struct {
		give map[string]string
		want bool
	}{
		{give: nil, want: false},
		{give: map[string]string{"OTEL_SERVICE_NAME": "baton-eu"}, want: false},
		{give: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{give: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, want: true},
		{give: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: false},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{give: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, want: false},
	}
	for _, tt := range tests {
		if got := tracingWanted(func(k string) string { return tt.give[k] }); got != tt.want {
			t.Errorf("tracingWanted(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// startTracing reads the process's OTEL_* variables: off without them, an
// exporter of the kind they name with them, an error for an unknown one.
func TestStartTracing(t *testing.T) {
	tp, stop, err := startTracing(t.Context())
	if err != nil || tp != nil {
		t.Fatalf("no OTEL_* variables: %v, %v; want tracing off", tp, err)
	}
	stop()
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	tp, stop, err = startTracing(t.Context())
	if err != nil || tp == nil {
		t.Fatalf("OTEL_TRACES_EXPORTER=console: %v, %v", tp, err)
	}
	stop()
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	if _, _, err := startTracing(t.Context()); err == nil {
		t.Error("OTEL_TRACES_EXPORTER=carrier-pigeon: no error")
	}
}

// A traced server gives each request a span named by its route pattern, the
// child of the caller's traceparent, with the request's Redis scripts as its
// children, and no span carries a lease id, a lock name or key, or an owner.
func TestTracing(t *testing.T) {
	rs := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg := testConfig()
	cfg.RedisURL, cfg.KeyPrefix, cfg.tracer = rs.URL(), "traced", tp

	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, zerolog.Nop(), func(a net.Addr) { addr <- a }) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	stopped := false
	stop := func() { // every span has ended once serve has returned
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}
	t.Cleanup(stop)

	const (
		name      = "trace:secret-name"
		owner     = "owner-label-7f3a"
		traceID   = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID  = "00f067aa0ba902b7"
		traceHead = "00-" + traceID + "-" + parentID + "-01"
	)
	send := func(method, path, body string, traceparent bool) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if traceparent {
			req.Header.Set("traceparent", traceHead)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	res := send("POST", "/v1/locks/"+name, `{"ttl_ms": 30000, "owner": "`+owner+`"}`, true)
	lease := res.Header.Get("Location")
	if res.StatusCode != http.StatusCreated || lease == "" {
		t.Fatalf("acquire: %d, Location %q", res.StatusCode, lease)
	}
	id := lease[strings.LastIndexByte(lease, '/')+1:]
	send("GET", lease, "", false)
	send("PATCH", lease, `{"ttl_ms": 20000}`, false)
	send("GET", "/v1/locks/"+name+"?wait_ms=10&fence=1", "", false)
	send("DELETE", lease, "", false)
	send("GET", "/no/such/route/"+id, "", false)
	stop()

	spans := rec.Ended()
	var server []sdktrace.ReadOnlySpan
	children := map[trace.SpanID][]string{} // Redis spans by parent
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindServer:
			server = append(server, s)
		case trace.SpanKindClient:
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s.Name())
		}
	}
	var names []string
	for _, s := range server {
		names = append(names, s.Name())
	}
	want := []string{"POST /v1/locks/{name}", "GET /v1/locks/{name}/leases/{lease}", "PATCH /v1/locks/{name}/leases/{lease}",
		"GET /v1/locks/{name}", "DELETE /v1/locks/{name}/leases/{lease}", "GET"}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("server spans:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	post := server[0]
	if p := post.Parent(); !p.IsRemote() || p.TraceID().String() != traceID || p.SpanID().String() != parentID {
		t.Errorf("POST span's parent: %v, want the traceparent's span %s of trace %s", p, parentID, traceID)
	}
	if post.SpanContext().TraceID().String() != traceID {
		t.Errorf("POST span in trace %s, want %s", post.SpanContext().TraceID(), traceID)
	}
	for _, s := range server[1:] {
		if s.Parent().IsValid() || s.SpanContext().TraceID().String() == traceID {
			t.Errorf("%s: parent %v, trace %s; want a trace of its own (no traceparent sent)", s.Name(), s.Parent(), s.SpanContext().TraceID())
		}
	}
	scripts := []string{"fcall acquire", "fcall lease", "fcall renew", "fcall state", "fcall release"}
	for i, s := range server[:5] {
		if got := children[s.SpanContext().SpanID()]; !slices.Contains(got, scripts[i]) {
			t.Errorf("%s: Redis spans beneath it %q, want %q", s.Name(), got, scripts[i])
		}
		if got := attr(s, "http.route"); !strings.HasSuffix(s.Name(), " "+got) {
			t.Errorf("%s: http.route %q", s.Name(), got)
		}
	}
	if got := attr(server[0], "http.response.status_code"); got != "201" {
		t.Errorf("POST span: status code %q, want 201", got)
	}

	// Nothing secret anywhere: not the lease id (nor its hashes, as Redis keys
	// and arguments carry them), not the lock name (keys carry it), not the owner.
	sum := sha256.Sum256([]byte(id))
	secrets := []string{id, hex.EncodeToString(sum[:]), base64.RawURLEncoding.EncodeToString(sum[:]), name, owner}
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, a := range s.Attributes() {
			texts = append(texts, string(a.Key)+"="+a.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, a := range ev.Attributes {
				texts = append(texts, string(a.Key)+"="+a.Value.Emit())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %q carries %q: %s", s.Name(), secret, text)
				}
			}
			if strings.HasPrefix(text, "db.statement=") {
				t.Errorf("span %q records the Redis command: %s", s.Name(), text)
			}
		}
	}
	if len(children) == 0 || len(spans) < len(server)+5 {
		t.Errorf("%d spans, %d of them server spans: want the Redis spans too", len(spans), len(server))
	}
}

// attr is the value of s's attribute key, as text.
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}
