package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/batonhq/baton/internal/batontest"
)

// -screenshots writes the dashboard's screenshots into docs/ (make
// screenshots); without it they go to the test's temporary directory, so that
// make test leaves the work tree as it was (fences and times differ each run).
var screenshots = flag.Bool("screenshots", false, "write the dashboard screenshots into docs/")

// The dashboard in Debian's headless Chromium against a real Baton (the
// server binary, its own redis-server, API keys): it asks for a key, lists the
// locks taken over the API with their holders, modes, fences, time left and
// queues, drops one released over the API, follows an opened lock live
// through the long-poll watch, filters by prefix, and force-releases with an
// admin key after a confirmation, while a read key's attempt shows the 403.
func TestDashboard(t *testing.T) {
	start := time.Now()
	b := newBrowser(t) // first: a missing or broken chromium fails the test at once
	srv := batontest.Start(t, batontest.Options{Keys: true, Env: []string{"BATON_TICKET_TTL=60s"}})
	api := apiClient{t: t, base: srv.URL, key: srv.Keys.Full}
	backup := api.acquire("ui:backup", `{"ttl_ms": 600000, "owner": "backup.sh"}`)
	api.acquire("ui:report", `{"shared": true, "limit": 3, "ttl_ms": 300000, "owner": "reader-1"}`)
	api.acquire("ui:report", `{"shared": true, "limit": 3, "ttl_ms": 90000, "owner": "reader-2"}`)
	payroll := api.acquire("ui:payroll", `{"ttl_ms": 600000, "owner": "payroll-run"}`)
	if st := api.post("/v1/locks/ui:payroll", `{"fair": true, "owner": "invoice-worker"}`); st != http.StatusAccepted {
		t.Fatalf("queue on ui:payroll: %d, want 202", st)
	}
	nightly := api.acquire("ui:nightly", `{"ttl_ms": 600000, "owner": "cron@db1"}`)
	api.acquire("jobs:reindex", `{"ttl_ms": 600000, "owner": "search"}`)

	// The page's files need no key (they hold no data) and carry a strict CSP;
	// /ui redirects to /ui/; a file that does not exist is a 404 problem.
	res, err := http.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/ui/" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("GET /ui without a key: %d at %s, CSP %q", res.StatusCode, res.Request.URL.Path, res.Header.Get("Content-Security-Policy"))
	}
	if res, err = http.Get(srv.URL + "/ui/nope.js"); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /ui/nope.js: %d %s, want a 404 problem", res.StatusCode, res.Header.Get("Content-Type"))
	}

	b.do("open the dashboard", chromedp.Navigate(srv.URL+"/ui/"))

	// No key yet: the first API call answers 401 and the page asks for one.
	b.until("the key dialog opens on the 401", `document.getElementById('key-dialog').open`)
	b.enterKey(srv.Keys.Reader)
	b.until("every lock is listed", `['ui:backup','ui:report','ui:payroll','ui:nightly','jobs:reindex']
		.every(n => document.querySelector('tr[data-name="' + n + '"]'))`)
	b.until("the rows show holder, mode, holders, fence and queue", fmt.Sprintf(`(() => {
		const cell = (n, c) => document.querySelector('tr[data-name="' + n + '"] td.' + c).textContent;
		return cell('ui:backup', 'holder') === 'backup.sh' && cell('ui:backup', 'mode') === 'exclusive' &&
			cell('ui:backup', 'fence') === '%d' && cell('ui:backup', 'queue') === 'none' &&
			cell('ui:report', 'mode') === 'shared' && cell('ui:report', 'holders') === '2 of 3' &&
			cell('ui:payroll', 'queue') === '1 waiting' && /^\d+ min \d\d s$/.test(cell('ui:backup', 'ttl'));
	})()`, backup.Fence))
	if !strings.Contains(b.text("#key-state"), "Using an API key") {
		t.Errorf("key state %q", b.text("#key-state"))
	}
	if got := b.eval(`sessionStorage.getItem('baton.apiKey') === '` + srv.Keys.Reader + `' && !location.href.includes('bk_')`); got != "true" {
		t.Errorf("the key is not (only) in sessionStorage: %s", b.eval(`location.href`))
	}
	ttlBefore := b.text(`tr[data-name="ui:backup"] td.ttl`)

	// Released over the API: gone from the list at the next refresh.
	api.send(http.MethodDelete, nightly.URL, "", http.StatusOK)
	b.until("the released lock leaves the list", `!document.querySelector('tr[data-name="ui:nightly"]')`)
	// Time left counts down by the second (a loaded machine may show both
	// readings within one).
	b.until("time left counts down from "+ttlBefore,
		`document.querySelector('tr[data-name="ui:backup"] td.ttl').textContent !== `+strconv.Quote(ttlBefore))

	// The prefix filter asks the server for names that start with it.
	b.do("type a prefix", chromedp.SendKeys(chromedp.ID("prefix"), "ui:"))
	b.until("the filter hides other names", `!document.querySelector('tr[data-name="jobs:reindex"]') &&
		!!document.querySelector('tr[data-name="ui:backup"]') && location.hash.includes('prefix=ui')`)

	// An opened lock is watched: released, it is handed to the queued ticket,
	// and the details show the new holder at once.
	b.do("open ui:payroll", chromedp.Click(chromedp.CSS(`tr[data-name="ui:payroll"] button`)))
	b.until("the details show the hold and the queue", `document.getElementById('detail-title').textContent === 'ui:payroll' &&
		document.getElementById('d-waiters').textContent === '1 waiting' &&
		document.querySelector('#holds tbody').textContent.includes('payroll-run') &&
		document.getElementById('watch-state').textContent.startsWith('Live')`)
	released := time.Now()
	api.send(http.MethodDelete, payroll.URL, "", http.StatusOK)
	b.until("the watch shows the handoff", `document.querySelector('#holds tbody').textContent.includes('invoice-worker') &&
		document.getElementById('d-waiters').textContent === 'none'`)
	// Only the opened lock's watch renders the details; had the release not
	// woken it, they would change when its long-poll ends (up to 25 s, the
	// page's WATCH_MAX), not within a few seconds, however loaded the machine.
	if d := time.Since(released); d > 8*time.Second {
		t.Errorf("the details took %v to show the handoff, want a long-poll's promptness", d)
	}

	// A read key may look but not force: the confirmation, then the 403.
	b.do("open ui:backup", chromedp.Click(chromedp.CSS(`tr[data-name="ui:backup"] button`)))
	b.until("ui:backup's details", `document.getElementById('detail-title').textContent === 'ui:backup' &&
		document.querySelector('#holds tbody').textContent.includes('backup.sh')`)
	b.forceRelease()
	b.until("the 403 is shown", `!document.getElementById('detail-alert').hidden &&
		document.getElementById('detail-alert').textContent.startsWith('403')`)
	if st := api.state("ui:backup"); !st.Held {
		t.Fatal("ui:backup was released with a read key")
	}

	// Forget the key: the next refresh meets a 401 and asks again. The admin
	// key's force release goes through.
	b.do("forget the key", chromedp.Click(chromedp.ID("forget-button")))
	b.until("the key dialog opens again", `document.getElementById('key-dialog').open`)
	b.enterKey(srv.Keys.Full)
	b.forceRelease()
	b.until("the forced lock leaves the list and its details show it free", `!document.querySelector('tr[data-name="ui:backup"]') &&
		document.getElementById('d-mode').textContent === 'free' && document.getElementById('detail-alert').hidden`)
	if st := api.state("ui:backup"); st.Held {
		t.Error("ui:backup is still held after the admin's force release")
	}

	// Every control has an accessible name.
	b.until("every control is named", `[...document.querySelectorAll('button, input')].every(el =>
		(el.labels && el.labels.length > 0) || el.getAttribute('aria-label') || el.textContent.trim())`)

	// Screenshots: more locks, no filter, a shared lock opened; at 1280x800
	// and on a phone.
	api.acquire("billing:invoice-2026-11", `{"ttl_ms": 45000, "owner": "billing-worker-3"}`)
	for _, owner := range []string{"billing-worker-7", "billing-worker-9"} {
		if st := api.post("/v1/locks/billing:invoice-2026-11", `{"fair": true, "owner": "`+owner+`"}`); st != http.StatusAccepted {
			t.Fatalf("queue on billing:invoice-2026-11: %d, want 202", st)
		}
	}
	api.acquire("exports", `{"shared": true, "limit": 4, "ttl_ms": 120000, "owner": "export-eu"}`)
	b.do("clear the prefix", chromedp.Evaluate[chromedp.Void](`(() => {
		const input = document.getElementById('prefix');
		input.value = '';
		input.dispatchEvent(new Event('input'));
	})()`))
	b.until("every lock is listed again", `['billing:invoice-2026-11', 'exports', 'jobs:reindex', 'ui:report']
		.every(n => document.querySelector('tr[data-name="' + n + '"]'))`)
	b.do("open ui:report", chromedp.Click(chromedp.CSS(`tr[data-name="ui:report"] button`)))
	b.until("ui:report's holds", `document.querySelectorAll('#holds tbody tr').length === 2 &&
		document.getElementById('watch-state').textContent.startsWith('Live')`)
	dir := t.TempDir()
	if *screenshots {
		dir = filepath.Join("..", "docs")
	}
	b.screenshot(filepath.Join(dir, "dashboard-desktop.png"), 1280, 800)
	b.do("close the details", chromedp.Click(chromedp.ID("close-detail")))
	b.until("the details close", `document.getElementById('detail').hidden`)
	b.screenshot(filepath.Join(dir, "dashboard-phone.png"), 390, 844)
	b.noErrors()
	srv.Stop() // Logs races with the process's output until it has exited
	for _, key := range []string{srv.Keys.Full, srv.Keys.Reader} {
		if strings.Contains(srv.Logs(), key) {
			t.Error("the server logged a key")
		}
	}
	t.Logf("dashboard test: %v in all", time.Since(start).Round(time.Millisecond))
}

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu     sync.Mutex
	errors []string // exceptions and console errors other than HTTP statuses
}

// newBrowser starts Debian's chromium with the flags this closed network needs
// (no background networking, no QUIC, no component updates or sync), a fresh
// profile, and the extra options given. A missing or broken chromium fails the
// test: make tools-test installs it.
func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v): the dashboard test needs Debian's chromium; make tools-test installs it (scripts/need.sh chromium=chromium)", err)
	}
	var out bytes.Buffer
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(&out),
	}
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, b.record); err != nil {
		t.Fatalf("chromium (%s) did not start: %v\n%s", path, err, out.String())
	}
	b.do("set the viewport", chromedp.EmulateViewport(1280, 800))
	return b
}

// record keeps the page's exceptions and console errors. Failed requests
// (the 401 and 403 the test provokes) are the network's, not the page's.
func (b *browser) record(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			msg += " " + ev.ExceptionDetails.Exception.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
			msg = fmt.Sprintf("console %s: %s", ev.Entry.Source, ev.Entry.Text)
		}
	}
	if msg != "" {
		b.mu.Lock()
		b.errors = append(b.errors, msg)
		b.mu.Unlock()
	}
}

func (b *browser) noErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		b.t.Errorf("page error (a CSP violation or a script error): %s", e)
	}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// until waits for a JavaScript expression to be true.
func (b *browser) until(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		b.t.Fatalf("waiting until %s: %v\npage: %s", what, err, b.eval(`document.body.innerText`))
	}
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return fmt.Sprint(v)
}

func (b *browser) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

func (b *browser) enterKey(key string) {
	b.t.Helper()
	b.do("enter the key", chromedp.SendKeys(chromedp.ID("key-input"), key), chromedp.Click(chromedp.ID("key-submit")))
	b.until("the key dialog closes", `!document.getElementById('key-dialog').open`)
}

// forceRelease asks for a force release of the opened lock and confirms it.
func (b *browser) forceRelease() {
	b.t.Helper()
	b.do("ask to force", chromedp.Click(chromedp.ID("force-button")))
	b.until("the confirmation names the lock", `document.getElementById('force-dialog').open &&
		document.getElementById('force-text').textContent.includes(document.getElementById('detail-title').textContent)`)
	b.do("confirm", chromedp.Click(chromedp.ID("force-confirm")))
	b.until("the confirmation closes", `!document.getElementById('force-dialog').open`)
}

// screenshot writes a PNG of the page at width x height CSS pixels.
func (b *browser) screenshot(file string, width, height int64) {
	b.t.Helper()
	b.do("resize", chromedp.EmulateViewport(width, height))
	b.until("the layout settles", `document.readyState === 'complete'`)
	png1, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(png1))
	if err != nil || int64(cfg.Width) != width || int64(cfg.Height) != height {
		b.t.Fatalf("screenshot: %dx%d (%v), want %dx%d", cfg.Width, cfg.Height, err, width, height)
	}
	if err := os.WriteFile(file, png1, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// apiClient calls the server's API with one key.
type apiClient struct {
	t         *testing.T
	base, key string
}

type lease struct {
	URL   string `json:"url"`
	Fence int64  `json:"fence"`
}

type lockState struct {
	Held bool `json:"held"`
}

func (c apiClient) call(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

func (c apiClient) send(method, path, body string, want int) []byte {
	c.t.Helper()
	st, raw := c.call(method, path, body)
	if st != want {
		c.t.Fatalf("%s %s: %d %s, want %d", method, path, st, raw, want)
	}
	return raw
}

func (c apiClient) post(path, body string) int {
	c.t.Helper()
	st, _ := c.call(http.MethodPost, path, body)
	return st
}

func (c apiClient) acquire(name, body string) lease {
	c.t.Helper()
	var l lease
	if err := json.Unmarshal(c.send(http.MethodPost, "/v1/locks/"+name, body, http.StatusCreated), &l); err != nil {
		c.t.Fatal(err)
	}
	return l
}

func (c apiClient) state(name string) lockState {
	c.t.Helper()
	var st lockState
	if err := json.Unmarshal(c.send(http.MethodGet, "/v1/locks/"+name, "", http.StatusOK), &st); err != nil {
		c.t.Fatal(err)
	}
	return st
}
