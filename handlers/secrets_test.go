package handlers_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Lease and ticket ids are bearer secrets: Redis holds only their SHA-256, and no
// log line, metric or state answer ever shows one.

// secretFlow runs every operation that hands out or takes a lease or ticket id,
// and returns every id it saw. At each point where Redis holds something it calls
// check with the ids so far and the ids that are live now (whose hashes Redis
// must hold).
func secretFlow(t *testing.T, e *env, check func(stage string, ids, live []string)) []string {
	t.Helper()
	var ids []string
	got := func(kind string, r *resp, status int) string {
		t.Helper()
		wantStatus(t, r, status, "")
		id := r.Str(kind)
		checkSecretID(t, kind, id)
		if loc := r.Header.Get("Location"); loc != "" && loc != r.Str("url") {
			t.Errorf("Location %q, want the body's url %q", loc, r.Str("url"))
		}
		ids = append(ids, id)
		return id
	}
	const name = "secret"
	path := "/v1/locks/" + name

	l1 := got("lease", e.acquire(name, map[string]any{"ttl_ms": 30000, "owner": "billing-worker-3"}), http.StatusCreated)
	url1 := "/v1/locks/" + name + "/leases/" + l1
	if again := got("lease", e.do(req{Method: "POST", Path: path, Body: map[string]any{"lease": l1}}), http.StatusOK); again != l1 {
		t.Fatalf("re-entry gave lease %q, want %q", again, l1)
	}
	wantStatus(t, e.do(req{Method: "PATCH", Path: url1, Body: map[string]any{"ttl_ms": 20000}}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "GET", Path: url1}), http.StatusOK, "")
	check("held, re-entered and renewed", ids, []string{l1})

	waiter := e.parkWaiter(name, map[string]any{"wait_ms": 20000, "owner": "waiter"})
	check("a request waiting", ids, []string{l1})
	wantStatus(t, e.do(req{Method: "DELETE", Path: url1}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: url1}), http.StatusOK, "")
	l2 := got("lease", awaitAnswer(t, waiter, 10*time.Second).r, http.StatusCreated)
	check("granted to the waiter", ids, []string{l2})

	t1 := got("ticket", e.do(req{Method: "POST", Path: path, Body: map[string]any{"fair": true, "owner": "fair-1"}}), http.StatusAccepted)
	turl1 := "/v1/locks/" + name + "/tickets/" + t1
	wantStatus(t, e.do(req{Method: "GET", Path: turl1}), http.StatusAccepted, "")
	wantStatus(t, e.do(req{Method: "GET", Path: turl1 + "?wait_ms=10"}), http.StatusAccepted, "")
	check("a ticket queued", ids, []string{l2, t1})
	wantStatus(t, e.do(req{Method: "DELETE", Path: turl1}), http.StatusNoContent, "")

	t2 := got("ticket", e.do(req{Method: "POST", Path: path, Body: map[string]any{"fair": true}}), http.StatusAccepted)
	forced := e.do(req{Method: "DELETE", Path: path + "?force=true"})
	wantStatus(t, forced, http.StatusOK, "")
	if !forced.Bool("released") {
		t.Fatalf("force: %s", forced.Raw)
	}
	check("forced, handed to an unpolled ticket", ids, []string{t2})
	l3 := got("lease", e.do(req{Method: "GET", Path: "/v1/locks/" + name + "/tickets/" + t2}), http.StatusOK)
	check("the ticket's grant claimed", ids, []string{l3})

	t3 := got("ticket", e.do(req{Method: "POST", Path: path, Body: map[string]any{"fair": true}}), http.StatusAccepted)
	poll := e.send(req{Method: "GET", Path: "/v1/locks/" + name + "/tickets/" + t3 + "?wait_ms=20000"})
	e.awaitWaiters(1)
	e.awaitSubscribers(name, 1)
	check("a ticket polling", ids, []string{l3, t3})
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/" + name + "/leases/" + l3}), http.StatusOK, "")
	l4 := got("lease", awaitAnswer(t, poll, 10*time.Second).r, http.StatusOK)
	check("handed to the polling ticket", ids, []string{l4})

	fair := e.send(req{Method: "POST", Path: path, Body: map[string]any{"fair": true, "wait_ms": 20000}})
	e.awaitWaiters(1)
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/" + name + "/leases/" + l4}), http.StatusOK, "")
	l5 := got("lease", awaitAnswer(t, fair, 10*time.Second).r, http.StatusCreated)
	check("granted to a fair waiter", ids, []string{l5})
	wantStatus(t, e.do(req{Method: "DELETE", Path: "/v1/locks/" + name + "/leases/" + l5}), http.StatusOK, "")
	wantStatus(t, e.do(req{Method: "DELETE", Path: path + "?force=true"}), http.StatusOK, "")
	check("free again", ids, nil)

	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] && id != l1 { // l1 came back once, from the re-entry
			t.Errorf("id %q issued twice", id)
		}
		seen[id] = true
	}
	return ids
}

var secretIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22,}$`)

// checkSecretID fails unless id is URL-safe base64 of at least 128 bits.
func checkSecretID(t *testing.T, kind, id string) {
	t.Helper()
	if !secretIDPattern.MatchString(id) {
		t.Errorf("%s id %q, want at least 22 characters of [A-Za-z0-9_-]", kind, id)
		return
	}
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(raw) < 16 {
		t.Errorf("%s id %q decodes to %d bytes (%v), want at least 16 of base64url", kind, id, len(raw), err)
	}
}

// secretForms are the ways an id could show up in plaintext: itself, and its
// bytes in hex and standard base64.
func secretForms(id string) []string {
	forms := []string{id}
	if raw, err := base64.RawURLEncoding.DecodeString(id); err == nil {
		forms = append(forms, hex.EncodeToString(raw))
		if std := base64.RawStdEncoding.EncodeToString(raw); std != id {
			forms = append(forms, std)
		}
	}
	return forms
}

// redisTexts is every key name, string value, hash field and value, set, list and
// zset member under the env's prefix, and every pub/sub channel name.
func redisTexts(t *testing.T, e *env) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, k := range e.keys() {
		out = append(out, k)
		switch typ := e.Redis.Type(ctx, k).Val(); typ {
		case "string":
			out = append(out, e.Redis.Get(ctx, k).Val())
		case "hash":
			for f, v := range e.Redis.HGetAll(ctx, k).Val() {
				out = append(out, f, v)
			}
		case "zset":
			out = append(out, e.Redis.ZRange(ctx, k, 0, -1).Val()...)
		case "set":
			out = append(out, e.Redis.SMembers(ctx, k).Val()...)
		case "list":
			out = append(out, e.Redis.LRange(ctx, k, 0, -1).Val()...)
		case "none": // expired since KEYS
		default:
			t.Errorf("key %s has type %s, which this scan cannot read", k, typ)
		}
	}
	chans, err := e.Redis.PubSubChannels(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return append(out, chans...)
}

// findSecrets describes each text in which an id shows, with the text around it.
func findSecrets(texts, ids []string) []string {
	var found []string
	for _, id := range ids {
		for _, form := range secretForms(id) {
			for _, s := range texts {
				if i := strings.Index(s, form); i >= 0 {
					found = append(found, form+" in …"+s[max(0, i-100):min(len(s), i+len(form)+40)]+"…")
				}
			}
		}
	}
	return found
}

func TestSecretsNotInRedis(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	ps := e.Redis.PSubscribe(ctx, e.Prefix+":*")
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	msgs := ps.Channel()

	secretFlow(t, e, func(stage string, ids, live []string) {
		t.Helper()
		texts := redisTexts(t, e)
		for _, f := range findSecrets(texts, ids) {
			t.Errorf("%s: Redis shows a secret: %s", stage, f)
		}
		all := strings.Join(texts, "\n")
		for _, id := range live {
			if !strings.Contains(all, idHash(id)) {
				t.Errorf("%s: Redis does not hold the SHA-256 of live id %s:\n%s", stage, id, all)
			}
		}
		state := e.do(req{Method: "GET", Path: "/v1/locks/secret"})
		wantStatus(t, state, http.StatusOK, "")
		for _, f := range findSecrets([]string{string(state.Raw)}, ids) {
			t.Errorf("%s: the lock state shows a secret: %s", stage, f)
		}
	})

	// Every message published on the env's channels, up to a last one of our own.
	sentinel := e.Prefix + ":{end}:ev"
	if err := e.Redis.Publish(ctx, sentinel, "end").Err(); err != nil {
		t.Fatal(err)
	}
	var payloads []string
	for done := false; !done; {
		select {
		case m := <-msgs:
			done = m.Channel == sentinel
			payloads = append(payloads, m.Channel, m.Payload)
		case <-time.After(10 * time.Second):
			t.Fatalf("no sentinel message within 10s; got %q", payloads)
		}
	}
	if !strings.Contains(strings.Join(payloads, "\n"), "\ng:") {
		t.Errorf("messages %q, want at least one grant (g:…)", payloads)
	}
}

func TestSecretsNotLogged(t *testing.T) {
	e := newEnv(t, envOptions{})
	ids := secretFlow(t, e, func(string, []string, []string) {})
	metrics := e.do(req{Method: "GET", Path: "/metrics"})
	wantStatus(t, metrics, http.StatusOK, "")
	logs := e.Logs.String()

	for _, f := range findSecrets(strings.Split(logs, "\n"), ids) {
		t.Errorf("the log shows a secret: %s", f)
	}
	for _, f := range findSecrets([]string{string(metrics.Raw)}, ids) {
		t.Errorf("/metrics shows a secret: %.200s", f)
	}
	routes := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var entry struct {
			Message string `json:"message"`
			Route   string `json:"route"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("log line %q is not JSON: %v", line, err)
			continue
		}
		if entry.Message == "request" {
			routes[entry.Route]++
		}
	}
	for _, route := range []string{"/v1/locks/{name}", "/v1/locks/{name}/leases/{lease}", "/v1/locks/{name}/tickets/{ticket}"} {
		if routes[route] == 0 {
			t.Errorf("access log routes %v, want lines for %s", routes, route)
		}
		if !strings.Contains(string(metrics.Raw), `route="`+route+`"`) {
			t.Errorf("/metrics has no series for route %s", route)
		}
	}
	for _, seg := range []string{"/leases/", "/tickets/"} {
		if n, m := strings.Count(logs, seg), strings.Count(logs, seg+"{"); n != m {
			t.Errorf("the log has %d %s followed by something other than a pattern, want 0", n-m, seg)
		}
	}
}
