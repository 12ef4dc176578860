package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/nodefacing"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// The OpenAPI document (api/sandbox/v1/openapi.json, served at
// /openapi.json) is held against the routes the server registers: every
// public route is in it with its method, and every operation in it is a
// route. The wire types stay hand-written Go (api/sandbox/v1, with
// openapi_test.go there keeping the schemas in step with them).

// undocumentedPrefixes are the registered routes the document leaves out,
// each with why.
var undocumentedPrefixes = map[string]string{
	"/internal/":        "the node-facing API between a node and the control plane, not public",
	nodefacing.Path:     "the node-facing API between a node and the control plane (Connect, api/node/v1), not public",
	E2BPathPrefix + "/": "the E2B-compatible surface, whose contract is E2B's published API (docs/e2b.md)",
	"/debug/pprof/":     "Go's net/http/pprof profiles, admin-only, for operators (docs/PERFORMANCE.md)",
	console.Path + "/":  "the web console's static assets (internal/console, docs/console.md), not an API",
}

// wildcard matches a path template's parameter, a ServeMux's {name} or
// {name...} and OpenAPI's {name}.
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// normalisePath replaces every parameter of a path template with {}, since
// the mux's names need not be the document's.
func normalisePath(path string) string { return wildcard.ReplaceAllString(path, "{}") }

// undocumented returns why the document leaves a registered path out, or ""
// when it must have it.
func undocumented(path string) string {
	if path == "/" {
		return "the catch-all 404"
	}
	for prefix, why := range undocumentedPrefixes {
		if strings.HasPrefix(path, prefix) {
			return why
		}
	}
	return ""
}

// pathMethods is one path template (as written) and its methods.
type pathMethods struct {
	path    string
	methods []string
}

// registeredRoutes returns the server's documented routes by normalised
// path; "*" is the method of a pattern without one (every method).
func registeredRoutes(t *testing.T) map[string]*pathMethods {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, patterns := New(Config{}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil))).handler()
	routes := map[string]*pathMethods{}
	for _, pattern := range patterns {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "*", pattern
		}
		if undocumented(path) != "" {
			continue
		}
		key := normalisePath(path)
		if routes[key] == nil {
			routes[key] = &pathMethods{path: path}
		}
		routes[key].methods = append(routes[key].methods, method)
	}
	if len(routes) < 40 {
		t.Fatalf("the server registers only %d documented paths: %v", len(routes), patterns)
	}
	return routes
}

// loadOpenAPI loads and validates the served document as OpenAPI 3.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(sandboxv1.OpenAPI)
	if err != nil {
		t.Fatalf("openapi.json does not load (a $ref that does not resolve?): %v", err)
	}
	return doc
}

// TestOpenAPIValid validates the document as OpenAPI 3.1: required fields,
// $refs resolving, path parameters declared, schemas and examples well
// formed.
func TestOpenAPIValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	ctx := openapi3.WithValidationOptions(context.Background(),
		openapi3.EnableMultiError(), openapi3.EnableExamplesValidation(), openapi3.EnableSchemaDefaultsValidation())
	if err := doc.Validate(ctx); err != nil {
		t.Errorf("openapi.json is not valid OpenAPI 3: %v", err)
	}
}

// TestOpenAPIMatchesRoutes: every public route the server registers is in
// the document with its method, and every operation of the document is a
// route the server registers.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	routes := registeredRoutes(t)
	doc := loadOpenAPI(t)
	paths := map[string]*pathMethods{}
	for path, item := range doc.Paths.Map() {
		ops := &pathMethods{path: path}
		for method := range item.Operations() {
			ops.methods = append(ops.methods, method)
		}
		paths[normalisePath(path)] = ops
		if why := undocumented(path); why != "" {
			t.Errorf("the document has %s, which it should leave out: %s", path, why)
		}
	}
	for key, route := range routes {
		ops, ok := paths[key]
		if !ok {
			t.Errorf("the server registers %v %s; the document (api/sandbox/v1/openapi.json) has no such path: add it", route.methods, route.path)
			continue
		}
		for _, method := range route.methods {
			if method != "*" && !slices.Contains(ops.methods, method) {
				t.Errorf("the server registers %s %s; the document has no %s operation on %s: add one", method, route.path, method, ops.path)
			}
		}
	}
	for key, ops := range paths {
		route, ok := routes[key]
		if !ok {
			t.Errorf("the document has %s, which the server does not register", ops.path)
			continue
		}
		if slices.Contains(route.methods, "*") {
			continue // every method is routed
		}
		for _, method := range ops.methods {
			if !slices.Contains(route.methods, method) {
				t.Errorf("the document has %s %s, which the server does not register", method, ops.path)
			}
		}
	}
}
