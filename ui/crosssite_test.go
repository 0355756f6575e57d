package ui_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/internal/batontest"
)

// attackerPage is a web page of another site that tries, from its visitor's
// browser, to take locks on a Baton in protected mode on the visitor's
// machine: requests a browser sends without asking the server first (no CORS
// preflight), one CORS request that needs a preflight, and a form. Each names
// its own lock, after the page's "as" query parameter. The title turns "done"
// once every request has been sent.
const attackerPage = `<!doctype html>
<meta charset="utf-8">
<title>working</title>
<form id="form" method="post" enctype="text/plain" target="sink"><input name='{"ttl_ms":86400000,"owner":"form' value='"}'></form>
<iframe name="sink"></iframe>
<script>
const baton = %q;
const as = new URLSearchParams(location.search).get('as');
const body = JSON.stringify({ttl_ms: 86400000, owner: 'web page'});
const tries = [
  ['blob', {method: 'POST', mode: 'no-cors', body: new Blob([body])}],
  ['text', {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: body}],
  ['json', {method: 'POST', mode: 'cors', headers: {'Content-Type': 'application/json'}, body: body}],
];
(async () => {
  for (const [kind, init] of tries) {
    try { await fetch(baton + '/v1/locks/victim-' + as + '-' + kind, init); } catch (e) {}
  }
  const form = document.getElementById('form');
  form.action = baton + '/v1/locks/victim-' + as + '-form';
  const sent = new Promise(done => document.querySelector('iframe').addEventListener('load', done));
  form.submit();
  await sent;
  document.title = 'done';
})();
</script>`

// A web page that its visitor's browser opens cannot take or see locks on a
// Baton in protected mode on the visitor's machine: not from another site,
// not from another port of the same host, not through DNS rebinding (a page
// whose host name now points at 127.0.0.1, so that its requests are
// same-origin to it). Baton's own dashboard, on Baton's own origin, still
// lists and force-releases locks without a key.
func TestWebPagesCannotDriveProtectedMode(t *testing.T) {
	b := newBrowser(t, chromedp.Flag("host-resolver-rules", "MAP attacker.example 127.0.0.1"))
	srv := batontest.Start(t, batontest.Options{})
	api := apiClient{t: t, base: srv.URL}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return // the form's target
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackerPage, srv.URL)
	}))
	t.Cleanup(page.Close)
	_, pagePort, _ := net.SplitHostPort(page.Listener.Addr().String())
	_, batonPort, _ := net.SplitHostPort(srv.Addr)

	for _, tt := range []struct{ as, url string }{
		{"crosssite", "http://attacker.example:" + pagePort + "/?as=crosssite"}, // another site
		{"sameSite", "http://127.0.0.1:" + pagePort + "/?as=sameSite"},          // this host, another port
	} {
		b.do("open the page "+tt.url, chromedp.Navigate(tt.url))
		b.until("the page sent its requests", `document.title === 'done'`)
		for _, kind := range []string{"blob", "text", "json", "form"} {
			if st := api.state("victim-" + tt.as + "-" + kind); st.Held {
				t.Errorf("a page at %s took a lock with a %s request", tt.url, kind)
			}
		}
	}

	// DNS rebinding: the attacker's name resolves to 127.0.0.1, so its page and
	// Baton share an origin, and Origin is the page's own.
	rebound := "http://attacker.example:" + batonPort
	b.do("open Baton by the attacker's name", chromedp.Navigate(rebound+"/ui/"))
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(async () => {
		const post = await fetch('/v1/locks/victim-rebound', {method: 'POST', headers: {'Content-Type': 'application/json'},
			body: JSON.stringify({ttl_ms: 86400000, owner: 'rebound'})});
		const list = await fetch('/v1/locks');
		return post.status + ' ' + list.status;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil || got != "401 401" {
		t.Errorf("a rebound page's POST and list: %q (%v), want 401 401", got, err)
	}
	if st := api.state("victim-rebound"); st.Held {
		t.Error("a page reached through DNS rebinding took a lock")
	}

	// The dashboard on Baton's own origin: no key needed on loopback, and its
	// force release (a DELETE that carries Origin) goes through.
	api.acquire("ui:protected", `{"ttl_ms": 600000, "owner": "cron"}`)
	b.do("open the dashboard", chromedp.Navigate(srv.URL+"/ui/"))
	b.until("the dashboard lists the lock", `!!document.querySelector('tr[data-name="ui:protected"]')`)
	b.do("open ui:protected", chromedp.Click(chromedp.CSS(`tr[data-name="ui:protected"] button`)))
	b.until("its details", `document.getElementById('detail-title').textContent === 'ui:protected'`)
	b.forceRelease()
	b.until("the forced lock leaves the list", `!document.querySelector('tr[data-name="ui:protected"]')`)
	if st := api.state("ui:protected"); st.Held {
		t.Error("the dashboard's force release on its own origin did not release the lock")
	}
	if logs := srv.Logs(); !strings.Contains(logs, "another origin") || !strings.Contains(logs, "Host must be localhost") {
		t.Errorf("the refusals are not in the audit log:\n%s", logs)
	}
}
