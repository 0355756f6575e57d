package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/batonhq/baton/ui"
)

func TestHandler(t *testing.T) {
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusTeapot) })
	h := ui.Handler(notFound)
	tests := []struct {
		give, method string
		wantStatus   int
		wantType     string
	}{
		{give: "/ui/", wantStatus: 200, wantType: "text/html; charset=utf-8"},
		{give: "/ui/index.html", wantStatus: 200, wantType: "text/html; charset=utf-8"},
		{give: "/ui/app.js", wantStatus: 200, wantType: "text/javascript; charset=utf-8"},
		{give: "/ui/app.css", wantStatus: 200, wantType: "text/css; charset=utf-8"},
		{give: "/ui/favicon.svg", wantStatus: 200, wantType: "image/svg+xml"},
		{give: "/ui/app.js", method: http.MethodHead, wantStatus: 200, wantType: "text/javascript; charset=utf-8"},
		{give: "/ui/missing.js", wantStatus: http.StatusTeapot},
		{give: "/ui/static/app.js", wantStatus: http.StatusTeapot},
		{give: "/ui/../ui.go", wantStatus: http.StatusTeapot},
		{give: "/ui/ui.go", wantStatus: http.StatusTeapot},
		{give: "/ui//app.js", wantStatus: http.StatusTeapot},
		{give: "/other/app.js", wantStatus: http.StatusTeapot},
	}
	for _, tt := range tests {
		method := tt.method
		if method == "" {
			method = http.MethodGet
		}
		req := httptest.NewRequest(method, "http://baton.test/", nil)
		req.URL.Path = tt.give // as the server decodes it, dot-segments and all
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.wantStatus {
			t.Errorf("%s %s: status %d, want %d", method, tt.give, rec.Code, tt.wantStatus)
			continue
		}
		if tt.wantStatus != http.StatusOK {
			continue
		}
		hd := rec.Header()
		if got := hd.Get("Content-Type"); got != tt.wantType {
			t.Errorf("%s: Content-Type %q, want %q", tt.give, got, tt.wantType)
		}
		if got := hd.Get("Content-Security-Policy"); got != ui.CSP {
			t.Errorf("%s: Content-Security-Policy %q", tt.give, got)
		}
		if hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("Content-Length") == "" {
			t.Errorf("%s: headers %v", tt.give, hd)
		}
	}
}

// The CSP allows no inline script or style, so the page must have none: no
// <script> without src, no style attribute or element, no on* handler, and no
// javascript: URL. And the key must never be put in a URL.
func TestNoInlineCode(t *testing.T) {
	page := get(t, "/ui/")
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`), // a script with a body
		regexp.MustCompile(`<script(?:(?:\s[^>]*)?)>`),      // ... or without src
		regexp.MustCompile(`\sstyle\s*=`),
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\son[a-z]+\s*=`),
		regexp.MustCompile(`javascript:`),
	} {
		for _, m := range bad.FindAllString(page, -1) {
			if strings.Contains(m, " src=") {
				continue
			}
			t.Errorf("index.html has inline code the CSP would block: %q", m)
		}
	}
	js := get(t, "/ui/app.js")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	if !strings.Contains(js, "sessionStorage") || !strings.Contains(js, "'Bearer ' + key") {
		t.Error("app.js: the key is not kept in sessionStorage and sent as a Bearer header")
	}
}

func get(t *testing.T, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	ui.Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d", path, rec.Code)
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}
