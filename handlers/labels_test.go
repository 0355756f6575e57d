package handlers_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Nothing a client sends may grow /metrics: label values come from fixed sets
// (methods, route patterns, statuses), never from the request itself.

// scrape returns /metrics as lines.
func (e *env) scrape() []string {
	e.t.Helper()
	r := e.do(req{Method: http.MethodGet, Path: "/metrics"})
	wantStatus(e.t, r, http.StatusOK, "")
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(r.Raw)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		e.t.Fatalf("/metrics: %v", err)
	}
	return lines
}

func TestMetricsLabelsBounded(t *testing.T) {
	e := newEnv(t, envOptions{})
	lease := e.acquire("held", map[string]any{"ttl_ms": 300000}).Str("url")
	paths := []string{"/v1/locks/held", lease, "/v1/locks/a%20b", "/nowhere", "/livez", "/metrics"}
	send := func(method string, i int) {
		t.Helper()
		r := e.do(req{Method: method, Path: paths[i%len(paths)], Header: map[string]string{"X-Request-Id": fmt.Sprintf("client-id-%d", i)}})
		if r.Status < 400 {
			t.Fatalf("%.40s %s: status %d, want it refused", method, paths[i%len(paths)], r.Status)
		}
	}
	// Once on every path, so that the series a made-up method may use exist.
	for i := range paths {
		send("WARMUP", i)
	}
	e.scrape()
	before := e.scrape()

	for i := range 300 {
		send(fmt.Sprintf("MADEUP%03d", i), i)
	}
	long := strings.Repeat("M", 50<<10)
	for i := range 20 {
		send(fmt.Sprintf("%s%02d", long, i), i)
	}

	after := e.scrape()
	if len(after) > len(before)+5 {
		t.Errorf("/metrics grew from %d to %d lines after 320 requests with made-up methods, want it bounded", len(before), len(after))
	}
	size, chosen := 0, 0
	for _, l := range after {
		size += len(l) + 1
		if strings.Contains(l, "MADEUP") || strings.Contains(l, "MMMM") || strings.Contains(l, "client-id-") {
			if chosen++; chosen == 1 {
				t.Errorf("/metrics line with a value the client chose: %.200s", l)
			}
		}
	}
	if chosen > 1 {
		t.Errorf("... and %d lines more", chosen-1)
	}
	if size > 256<<10 {
		t.Errorf("/metrics is %d bytes, want it bounded", size)
	}

	// The access log keeps the method, but never 50 KB of it.
	longLines, control := 0, 0
	for _, l := range strings.Split(e.Logs.String(), "\n") {
		if len(l) > 1024 {
			if longLines++; longLines == 1 {
				t.Errorf("a log line of %d bytes: %.200s...", len(l), l)
			}
		}
		if strings.ContainsFunc(l, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			if control++; control == 1 {
				t.Errorf("a log line with a control character: %q", l)
			}
		}
	}
	if longLines+control > 2 {
		t.Errorf("%d log lines over 1 KB, %d with control characters", longLines, control)
	}
	if !strings.Contains(e.Logs.String(), `"method":"MADEUP042"`) {
		t.Errorf("access log has no method MADEUP042:\n%.2000s", e.Logs.String())
	}
}
