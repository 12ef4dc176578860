// Package console serves the web console at /console: the single-page app
// built from console/ (TypeScript, bundled by esbuild in `make build`) into
// dist/, embedded in the binary. A binary built without it (plain `go
// build`) serves a page that says so, with status 503.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
)

// Path is where the console is served.
const Path = "/console"

//go:embed all:dist
var dist embed.FS

// notBuilt is the page of a binary built without the console's assets.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>SPACE console not built</title></head>
<body><h1>console not built: run make build</h1>
<p>This space binary was built without the web console's assets. Build it with <code>make build</code>
(which bundles console/ with npm and esbuild) and restart the server.</p></body></html>
`

// Handler serves the console from the embedded assets.
func Handler() http.Handler { return newHandler(dist) }

// Built reports whether this binary embeds the built console.
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}

func newHandler(fsys fs.FS) http.Handler {
	sub, err := fs.Sub(fsys, "dist")
	if err != nil {
		panic(err) // dist is embedded: fs.Sub cannot fail on it
	}
	_, err = fs.Stat(sub, "index.html")
	built := err == nil
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w, r)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the console serves GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		if !built {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(notBuilt))
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, Path)
		if rest == "" {
			http.Redirect(w, r, Path+"/", http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(path.Clean(rest), "/")
		if _, err := fs.Stat(sub, name); name == "" || err != nil {
			// The app routes in its fragment; anything else unknown is
			// the app's page too, so a reload of a deep link works.
			name = "index.html"
		}
		if name == "index.html" {
			w.Header().Set("Cache-Control", "no-cache")
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		if name == "index.html" {
			// FileServer redirects /index.html to ./: serve it as the root.
			r2.URL.Path = "/"
		}
		files.ServeHTTP(w, r2)
	})
}

// hostRe is a host[:port] fit to go into the policy: anything else (a
// client's odd Host header) leaves the WebSocket sources out rather than
// injecting into the header.
var hostRe = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// policy is the Content-Security-Policy for a request to host: only this
// origin's scripts, styles, images and fonts, no inline script or style, no
// plugins, no framing; connections to this origin and its WebSockets.
func policy(host string) string {
	connect := "connect-src 'self'"
	if hostRe.MatchString(host) {
		connect += " ws://" + host + " wss://" + host
	}
	return strings.Join([]string{
		"default-src 'self'",
		"script-src 'self'",
		"style-src 'self'",
		"img-src 'self' data:",
		"font-src 'self'",
		connect,
		"object-src 'none'",
		"base-uri 'none'",
		"form-action 'self'",
		"frame-ancestors 'none'",
	}, "; ")
}

func setHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", policy(r.Host))
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}
