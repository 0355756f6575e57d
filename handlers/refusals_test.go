package handlers_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/handlers"
)

// A 401 closes its connection: a client without a valid key keeps nothing open
// (thousands of connections held after their 401 each kept a goroutine and
// buffers until the idle timeout). A request behind it on the same connection
// is never read; a served request keeps its connection.
func TestUnauthorizedClosesTheConnection(t *testing.T) {
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	addr := strings.TrimPrefix(e.URL, "http://")
	pipelined := func(first string) []*http.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		second := "GET /v1/locks/billing:c HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + k.billing + "\r\n\r\n"
		if _, err := io.WriteString(c, first+second); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		var got []*http.Response
		for {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("the connection stayed open after %d answers", len(got))
				}
				return got // the server closed the connection
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			got = append(got, res)
			if len(got) == 2 {
				return got
			}
		}
	}
	bad := "GET /v1/locks/billing:c HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + auth.NewKey() + "\r\n\r\n"
	if got := pipelined(bad); len(got) != 1 || got[0].StatusCode != http.StatusUnauthorized || !got[0].Close {
		t.Errorf("a bad key, then a good one on the same connection: %d answers (%v), want one 401 and the connection closed", len(got), statuses(got))
	}
	none := "GET /v1/locks/billing:c HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	if got := pipelined(none); len(got) != 1 || got[0].StatusCode != http.StatusUnauthorized {
		t.Errorf("no key, then a good one: %d answers (%v), want one 401 and the connection closed", len(got), statuses(got))
	}
	good := "GET /v1/locks/billing:c HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + k.billing + "\r\n\r\n"
	if got := pipelined(good); len(got) != 2 || got[0].StatusCode != http.StatusOK || got[1].StatusCode != http.StatusOK {
		t.Errorf("two good requests on one connection: %v, want 200 200", statuses(got))
	}
}

func statuses(rs []*http.Response) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.StatusCode)
	}
	return out
}

// A burst of requests without a valid key writes a bounded log: the first few
// audit lines of each window in full, no access-log line per 401, then one
// summary line per window with the count and the peers. Every 401 is still
// counted in the metrics.
func TestUnauthorizedBurstIsLoggedAsASummary(t *testing.T) {
	const window, burst, n = time.Second, 3, 60
	defer handlers.SetAuditLimits(window, burst)()
	k := newTestKeys()
	e := newEnv(t, envOptions{Keys: k.file()})
	start := time.Now()
	for i := range n {
		h := bearer(auth.NewKey())
		if i%2 == 1 {
			h = nil
		}
		wantStatus(t, e.do(req{Method: "POST", Path: "/v1/locks/billing:a", Body: map[string]any{}, Header: h}), http.StatusUnauthorized, "unauthorized")
	}
	windows := int(time.Since(start)/window) + 2 // the burst may straddle window ends
	var full, summed int
	pollUntil(t, 5*time.Second, "the summaries count every refusal", func() bool {
		full, summed = refusalLines(t, e.Logs.String())
		return full+summed == n
	})
	if full > burst*windows {
		t.Errorf("%d full audit lines for %d refusals within %d windows, want at most %d", full, n, windows, burst*windows)
	}
	logs := e.Logs.String()
	if c := strings.Count(logs, `"status":401`); c != 0 {
		t.Errorf("%d access-log lines for 401s, want none", c)
	}
	if !strings.Contains(logs, `"peers":1`) || !strings.Contains(logs, `"peer_sample":["127.0.0.1"]`) {
		t.Errorf("the summary does not name the one peer:\n%s", logs)
	}
	if got := testutil.ToFloat64(e.Metrics.Requests.WithLabelValues("/v1/locks/{name}", "POST", "401", auth.Anonymous)); got != n {
		t.Errorf("baton_http_requests_total counts %v 401s, want %d", got, n)
	}
	// A window later, a refusal is logged in full again.
	time.Sleep(window + 100*time.Millisecond) // the window is a span of time: nothing to await but time
	wantStatus(t, e.do(req{Method: "GET", Path: "/v1/locks/billing:a"}), http.StatusUnauthorized, "unauthorized")
	if got, _ := refusalLines(t, e.Logs.String()); got != full+1 {
		t.Errorf("%d full audit lines after the window, want %d", got, full+1)
	}
}

// refusalLines counts the full audit lines of 401s in a log, and sums the
// counts of its summary lines.
func refusalLines(t *testing.T, logs string) (full, summed int) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var l struct {
			Event string `json:"event"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch l.Event {
		case "unauthorized":
			full++
		case "unauthorized_summary":
			summed += l.Count
		}
	}
	return full, summed
}
