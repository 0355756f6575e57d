// Package ui is Baton's web dashboard: plain HTML, CSS and JavaScript embedded
// in the binary and served at /ui/, with no build step. The page holds no data:
// it reads everything from the API (GET /v1/locks, GET /v1/locks/{name} and its
// long-poll watch, DELETE /v1/locks/{name}?force=true) with the API key the user
// types, which stays in the tab's sessionStorage and travels only in the
// Authorization header. So the files are served to anyone, and the API decides
// what each key sees.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the dashboard is served.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every file: scripts, styles and images
// from the dashboard's own files only (no inline script or style, no eval),
// requests to this origin only, and no framing, plugins, base or form targets.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler serves the dashboard's files for paths under Prefix (Prefix itself
// is index.html). Any other path, and a file of a type it does not serve, is
// handed to notFound.
func Handler(notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		ctype := contentTypes[path.Ext(name)]
		if !ok || ctype == "" || !fs.ValidPath(name) {
			notFound.ServeHTTP(w, r)
			return
		}
		body, err := fs.ReadFile(static, "static/"+name)
		if err != nil {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		_, _ = w.Write(body)
	})
}
