package e2bapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// E2B's routes that SPACE does not implement answer 400 naming the feature
// and what to use instead, not the 404 of a path E2B's API lacks: the SDKs
// read a 404 as "not found" (Template.exists answers false for a template
// SPACE has, a sandbox's logs throw NotFoundError for a sandbox that
// runs), which hides that the call was never served. docs/e2b-api.md lists
// every route of the SDKs and what SPACE answers.

// e2bFeature is one E2B feature SPACE lacks: its name and what to use.
type e2bFeature struct{ name, instead string }

var (
	e2bTemplates = e2bFeature{"template tags other than default, listing and updates through the E2B API (Template.build, Template.exists, getTags and the default tag work: docs/e2b.md)",
		"list and delete templates with `space template list` and `space template delete`; a name stands for its latest build, tagged default, which a create names as templateID"}
	e2bSecrets = e2bFeature{"secrets (E2B's team secrets)",
		"store the secret as a SPACE credential (docs/credentials.md): the gateway injects it into the sandbox's HTTPS requests without the sandbox holding it"}
	e2bVolumes = e2bFeature{"volumes (E2B's persistent volumes and their content API)",
		"keep data in a sandbox's own disk, which pause, hibernate and snapshots keep, and move files with the files API"}
	e2bLogs = e2bFeature{"sandbox logs",
		"read a sandbox's history with `space sandbox events ID`, and its commands' output through commands.run"}
	e2bManyMetrics = e2bFeature{"metrics of many sandboxes in one call (GET /sandboxes/metrics)",
		"call getMetrics of each sandbox (GET /sandboxes/{id}/metrics)"}
)

// e2bLacking is every route of the current e2b SDKs (JS 2.51, Python 2.45
// to 2.63: testdata/sdk-routes.txt) that SPACE does not serve, with its
// feature. A pattern without a method takes every method, and a trailing
// slash the whole subtree: the routes SPACE serves under the same prefix
// (DELETE /templates/{id}, the deletion of a snapshot) are more specific
// and win.
var e2bLacking = []struct {
	pattern string
	feature e2bFeature
}{
	{"GET /sandboxes/metrics", e2bManyMetrics},
	{"GET /sandboxes/{id}/logs", e2bLogs},
	{"GET /v2/sandboxes/{id}/logs", e2bLogs},

	{"/default-templates", e2bTemplates},
	{"/templates", e2bTemplates},
	{"/templates/", e2bTemplates},
	{"DELETE /templates/tags", e2bTemplates},
	{"/v2/templates", e2bTemplates},
	{"/v2/templates/", e2bTemplates},
	{"/v3/templates", e2bTemplates},
	{"/v3/templates/", e2bTemplates},

	{"/secrets", e2bSecrets},
	{"/secrets/", e2bSecrets},

	{"/volumes", e2bVolumes},
	{"/volumes/", e2bVolumes},
	{"/volumecontent/", e2bVolumes},
}

// e2bLackingPattern is l's pattern on the mux, under PathPrefix.
func e2bLackingPattern(pattern string) string {
	if method, path, ok := strings.Cut(pattern, " "); ok {
		return method + " " + PathPrefix + path
	}
	return PathPrefix + pattern
}

// e2bLacks answers a route of feature f: 400 naming it and what to use.
func (a *API) e2bLacks(f e2bFeature) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.writeE2BErr(w, r, fmt.Errorf("%w: %s %s: %s are not supported by SPACE; %s (docs/e2b-api.md)",
			errdefs.ErrInvalidArgument, r.Method, service.Clip(r.URL.Path), f.name, f.instead))
	}
}
