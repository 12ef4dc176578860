package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/kms/localkms"
	"github.com/spacesandbox/space/internal/nodefacing"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// The authorization matrix (G-1): every route the server registers, and
// the routes it serves by Host or header (ServicePort ingress, the E2B data
// plane), against six principals, each cell the status expected. A route
// the server registers without a row here fails TestAuthzMatrixCoversRoutes,
// and so does a row for a route that is gone.

// principal is who sends a request.
type principal int

const (
	anonymous   principal = iota // no credential
	garbageKey                   // a bearer value that is no key
	revokedKey                   // the owner tenant's key, revoked
	otherTenant                  // a valid key of another tenant
	owner                        // the key of the tenant owning the resources
	adminKey                     // an admin key (of its own tenant)
	principals
)

var principalNames = [principals]string{"no key", "garbage key", "revoked key", "another tenant's key", "the owner's key", "the admin key"}

// Cell expectations besides a status.
const (
	// allowed: authorization passed; whatever the fake node makes of the
	// request, the answer is none of 401, 403 and 404.
	allowed = -1
	// listed: allowed, and the answer names none of the owner's resources.
	listed = -2
)

// Rows of expectations by kind of route.
var (
	tenantResource = [principals]int{401, 401, 401, 404, allowed, 404}
	tenantScope    = [principals]int{401, 401, 401, listed, allowed, listed}
	adminOnly      = [principals]int{401, 401, 401, 403, 403, allowed}
	public         = [principals]int{200, 200, 200, 200, 200, 200}
	// publicNotReady: /readyz answers everyone alike, no key needed; the
	// matrix's server has no base template, so it is not ready.
	publicNotReady = [principals]int{503, 503, 503, 503, 503, 503}
	nodeOnly       = [principals]int{401, 401, 401, 401, 401, 401}
	noRoute        = [principals]int{404, 404, 404, 404, 404, 404}
	// e2bUnsupported: an E2B route SPACE lacks, refused by name to any
	// authenticated caller (e2bapi/lacks.go).
	e2bUnsupported = [principals]int{401, 401, 401, 400, 400, 400}
	metricsCells   = [principals]int{401, 401, 401, 403, 403, 200}
	// e2bBuild: an E2B template build's routes; a build is its admin
	// requester's and the fixture has none, so every caller finds none.
	e2bBuild = [principals]int{401, 401, 401, 404, 404, 404}
	// e2bAlias: whether a template name is taken, answered to every
	// caller (SPACE's templates are shared, as GET /v1/templates lists).
	e2bAlias = [principals]int{401, 401, 401, allowed, allowed, allowed}
	// e2bTagAssign: tagging is an admin's, as a build is; the fixture's
	// template has no E2B build, so the admin finds none.
	e2bTagAssign = [principals]int{401, 401, 401, 403, 403, 404}
	// e2bUpload: an upload url is authorized by its MAC, never by a key;
	// the matrix's url has none.
	e2bUpload = [principals]int{401, 401, 401, 401, 401, 401}
	// keyRevoke: an admin revokes any tenant's key (admin.go).
	keyRevoke = [principals]int{401, 401, 401, 404, allowed, allowed}
	// dataPlane: the E2B data plane takes the sandbox's access token only;
	// its principals are: no token, a garbage token, the owner's API key,
	// another tenant's sandbox's token, the owner's token, the admin key.
	dataPlane = [principals]int{401, 401, 401, 401, allowed, 401}
)

// authzFixture is the owner tenant's resources one row works on.
type authzFixture struct {
	sandbox, snapshot, credential, key, template, node string
	// tenant is a disposable tenant with one encryption key (encKey): the
	// admin routes on tenants may delete it.
	tenant, encKey string
	// token is the sandbox's E2B envd access token.
	token string
}

// ids lists the fixture's identifiers, to normalise answers.
func (f authzFixture) ids() []string {
	return []string{f.sandbox, f.snapshot, f.credential, f.key, f.template, f.tenant, f.encKey}
}

// authzReq is one request of a row.
type authzReq struct {
	method, path, body string
	host               string
	header             map[string]string
	websocket          bool
	// upgrade, when set, is the Upgrade protocol asked for (websocket
	// when websocket is set).
	upgrade string
	// e2b sends the principal's key in X-API-Key, as the E2B SDKs do.
	e2b bool
	// dataPlane sends the principal's data-plane token (see dataPlane).
	dataPlane bool
}

// authzRow is one route: its pattern as registered ("" for a route served
// by Host or header), the request, and the cells.
type authzRow struct {
	pattern string
	name    string // for the unregistered routes
	req     func(f authzFixture) authzReq
	want    [principals]int
}

func get(path string) func(authzFixture) authzReq { return call("GET", path, "") }

// call is a request whose path and body name the fixture's ids through
// {sandbox}, {snapshot}, {credential}, {key}, {template}, {node},
// {tenant} and {enckey}.
func call(method, path, body string) func(authzFixture) authzReq {
	return func(f authzFixture) authzReq {
		r := strings.NewReplacer("{sandbox}", f.sandbox, "{snapshot}", f.snapshot, "{credential}", f.credential, "{key}", f.key,
			"{template}", f.template, "{node}", f.node, "{tenant}", f.tenant, "{enckey}", f.encKey)
		return authzReq{method: method, path: r.Replace(path), body: r.Replace(body)}
	}
}

// connectCall is a Connect unary call (JSON) of procedure path.
func connectCall(path, body string) func(authzFixture) authzReq {
	c := call("POST", path, body)
	return func(f authzFixture) authzReq {
		r := c(f)
		r.header = map[string]string{"Content-Type": "application/json"}
		return r
	}
}

func e2bCall(method, path, body string) func(authzFixture) authzReq {
	c := call(method, E2BPathPrefix+path, body)
	return func(f authzFixture) authzReq { r := c(f); r.e2b = true; return r }
}

func wsCall(path string) func(authzFixture) authzReq {
	c := get(path)
	return func(f authzFixture) authzReq { r := c(f); r.websocket = true; return r }
}

const credentialBody = `{"name":"gh","secret":"matrix-secret-0123456789","injection":{"method":"header","name":"Authorization"},"allowed_hosts":["api.github.com"]}`

// authzRows is the matrix.
var authzRows = []authzRow{
	{pattern: "GET /healthz", req: get("/healthz"), want: public},
	{pattern: "GET /readyz", req: get("/readyz"), want: publicNotReady},
	{pattern: "GET /openapi.json", req: get("/openapi.json"), want: public},
	// The console's assets are public (the app signs in with a key in the
	// browser); a binary built without them answers 503 to everyone.
	{pattern: "GET " + console.Path + "/", req: get(console.Path + "/"), want: consoleCells()},
	{pattern: "GET /metrics", req: get("/metrics"), want: metricsCells},
	{pattern: "POST /internal/v1/nodes/{id}/heartbeat", req: call("POST", "/internal/v1/nodes/{node}/heartbeat", `{"address":"127.0.0.1:9","token":"t"}`), want: nodeOnly},
	{pattern: "POST /internal/v1/nodes/{node}/credentials/resolve", req: call("POST", "/internal/v1/nodes/n1/credentials/resolve", `{"sandbox_id":"{sandbox}","exec_id":"x","host":"api.github.com"}`), want: nodeOnly},
	{pattern: "POST " + nodefacing.Path, req: connectCall("/space.node.v1.ControlPlaneService/Heartbeat", `{"nodeId":"{node}","address":"127.0.0.1:9","token":"t"}`), want: nodeOnly},
	{name: "POST " + nodefacing.Path + "ResolveCredential", req: connectCall("/space.node.v1.ControlPlaneService/ResolveCredential", `{"nodeId":"n1","sandboxId":"{sandbox}","execId":"x","host":"api.github.com"}`), want: nodeOnly},

	{pattern: "POST /v1/sandboxes", req: call("POST", "/v1/sandboxes", `{"template":"minimal","cpus":1,"memory_mib":256}`), want: tenantScope},
	{pattern: "GET /v1/sandboxes", req: get("/v1/sandboxes"), want: tenantScope},
	{pattern: "GET /v1/sandboxes/{id}", req: get("/v1/sandboxes/{sandbox}"), want: tenantResource},
	{pattern: "DELETE /v1/sandboxes/{id}", req: call("DELETE", "/v1/sandboxes/{sandbox}", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/exec", req: call("POST", "/v1/sandboxes/{sandbox}/exec", `{"cmd":["true"]}`), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/exec", req: wsCall("/v1/sandboxes/{sandbox}/exec"), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/processes", req: get("/v1/sandboxes/{sandbox}/processes"), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/code", req: call("POST", "/v1/sandboxes/{sandbox}/code", `{"code":"1+1"}`), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/code/contexts", req: get("/v1/sandboxes/{sandbox}/code/contexts"), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/code/contexts", req: call("POST", "/v1/sandboxes/{sandbox}/code/contexts", `{"language":"python"}`), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/code/contexts/{context}/restart", req: call("POST", "/v1/sandboxes/{sandbox}/code/contexts/c1/restart", ""), want: tenantResource},
	{pattern: "DELETE /v1/sandboxes/{id}/code/contexts/{context}", req: call("DELETE", "/v1/sandboxes/{sandbox}/code/contexts/c1", ""), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/files", req: get("/v1/sandboxes/{sandbox}/files?path=/tmp/a"), want: tenantResource},
	{pattern: "PUT /v1/sandboxes/{id}/files", req: call("PUT", "/v1/sandboxes/{sandbox}/files?path=/tmp/a", "hello"), want: tenantResource},
	{pattern: "DELETE /v1/sandboxes/{id}/files", req: call("DELETE", "/v1/sandboxes/{sandbox}/files?path=/tmp/a", ""), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/files/list", req: get("/v1/sandboxes/{sandbox}/files/list?path=/tmp"), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/files/stat", req: get("/v1/sandboxes/{sandbox}/files/stat?path=/tmp/a"), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/files/mkdir", req: call("POST", "/v1/sandboxes/{sandbox}/files/mkdir?path=/tmp/d", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/files/move", req: call("POST", "/v1/sandboxes/{sandbox}/files/move?from=/tmp/a&to=/tmp/b", ""), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/files/watch", req: wsCall("/v1/sandboxes/{sandbox}/files/watch?path=/tmp"), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/pause", req: call("POST", "/v1/sandboxes/{sandbox}/pause", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/resume", req: call("POST", "/v1/sandboxes/{sandbox}/resume", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/timeout", req: call("POST", "/v1/sandboxes/{sandbox}/timeout", `{"timeout":"10m"}`), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/egress", req: get("/v1/sandboxes/{sandbox}/egress"), want: tenantResource},
	{pattern: "PUT /v1/sandboxes/{id}/egress", req: call("PUT", "/v1/sandboxes/{sandbox}/egress", `{"allow_internet":true}`), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/stop", req: call("POST", "/v1/sandboxes/{sandbox}/stop", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/start", req: call("POST", "/v1/sandboxes/{sandbox}/start", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/rollback", req: call("POST", "/v1/sandboxes/{sandbox}/rollback", `{"snapshot":"{snapshot}"}`), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/fork", req: call("POST", "/v1/sandboxes/{sandbox}/fork", `{}`), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/hibernate", req: call("POST", "/v1/sandboxes/{sandbox}/hibernate", ""), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/restore", req: call("POST", "/v1/sandboxes/{sandbox}/restore", `{}`), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/ports", req: call("POST", "/v1/sandboxes/{sandbox}/ports", `{"port":8080}`), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/ports", req: get("/v1/sandboxes/{sandbox}/ports"), want: tenantResource},
	{pattern: "DELETE /v1/sandboxes/{id}/ports/{port}", req: call("DELETE", "/v1/sandboxes/{sandbox}/ports/3000", ""), want: tenantResource},
	{pattern: "/v1/sandboxes/{id}/ports/{port}/proxy/{rest...}", req: get("/v1/sandboxes/{sandbox}/ports/3000/proxy/index.html"), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/ports/{port}/tcp", req: func(f authzFixture) authzReq {
		r := get("/v1/sandboxes/{sandbox}/ports/2222/tcp")(f)
		r.upgrade = "space-tcp"
		return r
	}, want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/snapshots", req: get("/v1/sandboxes/{sandbox}/snapshots"), want: tenantResource},
	{pattern: "POST /v1/sandboxes/{id}/snapshots", req: call("POST", "/v1/sandboxes/{sandbox}/snapshots", `{}`), want: tenantResource},
	{pattern: "DELETE /v1/sandboxes/{id}/snapshots/{snapshot}", req: call("DELETE", "/v1/sandboxes/{sandbox}/snapshots/{snapshot}", ""), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/events", req: get("/v1/sandboxes/{sandbox}/events"), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/metrics", req: get("/v1/sandboxes/{sandbox}/metrics"), want: tenantResource},
	{pattern: "GET /v1/sandboxes/{id}/ca.pem", req: get("/v1/sandboxes/{sandbox}/ca.pem"), want: tenantResource},

	{pattern: "POST /v1/credentials", req: call("POST", "/v1/credentials", credentialBody), want: tenantScope},
	{pattern: "GET /v1/credentials", req: get("/v1/credentials"), want: tenantScope},
	{pattern: "GET /v1/credentials/audit", req: get("/v1/credentials/audit"), want: tenantScope},
	{pattern: "GET /v1/credentials/{id}", req: get("/v1/credentials/{credential}"), want: tenantResource},
	{pattern: "DELETE /v1/credentials/{id}", req: call("DELETE", "/v1/credentials/{credential}", ""), want: tenantResource},

	// Templates are shared: every tenant lists them; only admins change them.
	{pattern: "GET /v1/templates", req: get("/v1/templates"), want: [principals]int{401, 401, 401, 200, 200, 200}},
	{pattern: "POST /v1/templates", req: call("POST", "/v1/templates", `{"name":"matrix-built","from":"minimal"}`), want: adminOnly},
	{pattern: "DELETE /v1/templates/{name}", req: call("DELETE", "/v1/templates/{template}", ""), want: adminOnly},
	{pattern: "PUT /v1/templates/{name}/egress", req: call("PUT", "/v1/templates/{template}/egress", `{"allow_internet":true}`), want: adminOnly},

	{pattern: "GET /v1/tenants", req: get("/v1/tenants"), want: adminOnly},
	{pattern: "POST /v1/tenants", req: call("POST", "/v1/tenants", `{"name":"matrix-made"}`), want: adminOnly},
	{pattern: "DELETE /v1/tenants/{id}", req: call("DELETE", "/v1/tenants/{tenant}", ""), want: adminOnly},
	{pattern: "PUT /v1/tenants/{id}/quota", req: call("PUT", "/v1/tenants/{tenant}/quota", `{"max_sandboxes":5}`), want: adminOnly},
	{pattern: "GET /v1/nodes", req: get("/v1/nodes"), want: adminOnly},
	{pattern: "POST /v1/nodes/{id}/drain", req: call("POST", "/v1/nodes/{node}/drain", ""), want: adminOnly},
	{pattern: "POST /v1/nodes/{id}/undrain", req: call("POST", "/v1/nodes/{node}/undrain", ""), want: adminOnly},
	{pattern: "GET /v1/signing-keys", req: get("/v1/signing-keys"), want: adminOnly},
	{pattern: "POST /v1/signing-keys/rotate", req: call("POST", "/v1/signing-keys/rotate", ""), want: adminOnly},
	{pattern: "GET /v1/tenants/{id}/encryption-keys", req: get("/v1/tenants/{tenant}/encryption-keys"), want: adminOnly},
	{pattern: "DELETE /v1/tenants/{id}/encryption-keys/{key}", req: call("DELETE", "/v1/tenants/{tenant}/encryption-keys/{enckey}", ""), want: adminOnly},
	{pattern: "GET /debug/pprof/", req: get("/debug/pprof/"), want: adminOnly},
	{pattern: "GET /debug/pprof/cmdline", req: get("/debug/pprof/cmdline"), want: adminOnly},
	{pattern: "GET /debug/pprof/profile", req: get("/debug/pprof/profile?seconds=1"), want: adminOnly},
	{pattern: "GET /debug/pprof/symbol", req: get("/debug/pprof/symbol"), want: adminOnly},
	{pattern: "GET /debug/pprof/trace", req: get("/debug/pprof/trace?seconds=0.1"), want: adminOnly},

	{pattern: "GET /v1/keys", req: get("/v1/keys"), want: tenantScope},
	{pattern: "POST /v1/keys", req: call("POST", "/v1/keys", `{}`), want: tenantScope},
	{pattern: "DELETE /v1/keys/{id}", req: call("DELETE", "/v1/keys/{key}", ""), want: keyRevoke},

	{pattern: "GET /e2b/health", req: get("/e2b/health"), want: public},
	{pattern: "POST /e2b/sandboxes", req: e2bCall("POST", "/sandboxes", `{"templateID":"minimal"}`), want: tenantScope},
	{pattern: "POST /e2b/v2/sandboxes", req: e2bCall("POST", "/v2/sandboxes", `{"templateID":"minimal"}`), want: tenantScope},
	{pattern: "GET /e2b/sandboxes", req: e2bCall("GET", "/sandboxes", ""), want: tenantScope},
	{pattern: "GET /e2b/v2/sandboxes", req: e2bCall("GET", "/v2/sandboxes", ""), want: tenantScope},
	{pattern: "GET /e2b/sandboxes/{id}", req: e2bCall("GET", "/sandboxes/{sandbox}", ""), want: tenantResource},
	{pattern: "DELETE /e2b/sandboxes/{id}", req: e2bCall("DELETE", "/sandboxes/{sandbox}", ""), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/timeout", req: e2bCall("POST", "/sandboxes/{sandbox}/timeout", `{"timeout":60}`), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/refreshes", req: e2bCall("POST", "/sandboxes/{sandbox}/refreshes", `{"duration":60}`), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/pause", req: e2bCall("POST", "/sandboxes/{sandbox}/pause", ""), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/connect", req: e2bCall("POST", "/sandboxes/{sandbox}/connect", `{"timeout":60}`), want: tenantResource},
	{pattern: "POST /e2b/v2/sandboxes/{id}/connect", req: e2bCall("POST", "/v2/sandboxes/{sandbox}/connect", `{"timeout":60}`), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/resume", req: e2bCall("POST", "/sandboxes/{sandbox}/resume", `{"timeout":60}`), want: tenantResource},
	{pattern: "GET /e2b/sandboxes/{id}/metrics", req: e2bCall("GET", "/sandboxes/{sandbox}/metrics", ""), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/snapshots", req: e2bCall("POST", "/sandboxes/{sandbox}/snapshots", `{}`), want: tenantResource},
	{pattern: "GET /e2b/snapshots", req: e2bCall("GET", "/snapshots", ""), want: tenantScope},
	{pattern: "DELETE /e2b/templates/{id}", req: e2bCall("DELETE", "/templates/{snapshot}", ""), want: tenantResource},
	{pattern: "POST /e2b/sandboxes/{id}/fork", req: e2bCall("POST", "/sandboxes/{sandbox}/fork", `{}`), want: tenantResource},
	{pattern: "PUT /e2b/sandboxes/{id}/network", req: e2bCall("PUT", "/sandboxes/{sandbox}/network", `{}`), want: tenantResource},
	{pattern: "POST /e2b/v3/templates", req: e2bCall("POST", "/v3/templates", `{"name":"e2bnew"}`), want: adminOnly},
	{pattern: "GET /e2b/templates/aliases/{alias}", req: e2bCall("GET", "/templates/aliases/{template}", ""), want: e2bAlias},
	{pattern: "GET /e2b/templates/{templateID}/files/{hash}", req: e2bCall("GET", "/templates/{template}/files/"+strings.Repeat("a", 64), ""), want: e2bBuild},
	{pattern: "POST /e2b/v2/templates/{templateID}/builds/{buildID}", req: e2bCall("POST", "/v2/templates/{template}/builds/bld-x", `{"fromTemplate":"minimal","steps":[]}`), want: e2bBuild},
	{pattern: "GET /e2b/templates/{templateID}/builds/{buildID}/status", req: e2bCall("GET", "/templates/{template}/builds/bld-x/status", ""), want: e2bBuild},
	{pattern: "GET /e2b/templates/{templateID}/{sub}", req: e2bCall("GET", "/templates/{template}/tags", ""), want: e2bBuild},
	{pattern: "POST /e2b/templates/tags", req: e2bCall("POST", "/templates/tags", `{"target":"{template}","tags":["default"]}`), want: e2bTagAssign},
	{pattern: "PUT /e2b/template-files/{tenant}/{hash}", req: e2bCall("PUT", "/template-files/74/"+strings.Repeat("a", 64)+"?expires=9999999999&sig=00", "x"), want: e2bUpload},
	{pattern: "GET /e2b/sandboxes/metrics", req: e2bCall("GET", "/sandboxes/metrics", ""), want: e2bUnsupported},
	{pattern: "GET /e2b/sandboxes/{id}/logs", req: e2bCall("GET", "/sandboxes/{sandbox}/logs", ""), want: e2bUnsupported},
	{pattern: "GET /e2b/v2/sandboxes/{id}/logs", req: e2bCall("GET", "/v2/sandboxes/{sandbox}/logs", ""), want: e2bUnsupported},
	{pattern: "/e2b/default-templates", req: e2bCall("GET", "/default-templates", ""), want: e2bUnsupported},
	{pattern: "/e2b/templates", req: e2bCall("GET", "/templates", ""), want: e2bUnsupported},
	{pattern: "/e2b/templates/", req: e2bCall("GET", "/templates/base", ""), want: e2bUnsupported},
	{pattern: "DELETE /e2b/templates/tags", req: e2bCall("DELETE", "/templates/tags", `{}`), want: e2bUnsupported},
	{pattern: "/e2b/v2/templates", req: e2bCall("GET", "/v2/templates", ""), want: e2bUnsupported},
	{pattern: "/e2b/v2/templates/", req: e2bCall("PATCH", "/v2/templates/base", `{}`), want: e2bUnsupported},
	{pattern: "/e2b/v3/templates", req: e2bCall("GET", "/v3/templates", ""), want: e2bUnsupported},
	{pattern: "/e2b/v3/templates/", req: e2bCall("POST", "/v3/templates/x", `{}`), want: e2bUnsupported},
	{pattern: "/e2b/secrets", req: e2bCall("GET", "/secrets", ""), want: e2bUnsupported},
	{pattern: "/e2b/secrets/", req: e2bCall("DELETE", "/secrets/s1", ""), want: e2bUnsupported},
	{pattern: "/e2b/volumes", req: e2bCall("POST", "/volumes", `{}`), want: e2bUnsupported},
	{pattern: "/e2b/volumes/", req: e2bCall("GET", "/volumes/v1", ""), want: e2bUnsupported},
	{pattern: "/e2b/volumecontent/", req: e2bCall("GET", "/volumecontent/v1/dir", ""), want: e2bUnsupported},
	{pattern: "/e2b/", req: e2bCall("GET", "/no/such/route", ""), want: noRoute},
	{pattern: "/", req: get("/v1/no/such/route"), want: noRoute},

	// Served by Host or header, before the mux.
	{name: "ingress by host {port}-{sandbox}.localhost", want: tenantResource, req: func(f authzFixture) authzReq {
		return authzReq{method: "GET", path: "/index.html", host: "3000-" + f.sandbox + ".localhost"}
	}},
	{name: "ingress by X-Space-Sandbox and X-Space-Port", want: tenantResource, req: func(f authzFixture) authzReq {
		return authzReq{method: "GET", path: "/index.html", header: map[string]string{sandboxv1.SandboxHeader: f.sandbox, sandboxv1.PortHeader: "3000"}}
	}},
	{name: "E2B data plane (envd) by header", want: dataPlane, req: func(f authzFixture) authzReq {
		return authzReq{method: "POST", path: "/process.Process/Start", body: "{}", dataPlane: true,
			header: map[string]string{e2bapi.SandboxHeader: f.sandbox, e2bapi.PortHeader: "49983"}}
	}},
	{name: "E2B data plane (envd) by host", want: dataPlane, req: func(f authzFixture) authzReq {
		return authzReq{method: "POST", path: "/filesystem.Filesystem/ListDir", body: "{}", dataPlane: true, host: "49983-" + f.sandbox + ".localhost"}
	}},
}

// authzPlane is a real server over SQLite with a credential store, a CA
// sealer and a local KMS; one fake node (n1) that starts executions and
// answers guest requests; the owner tenant (cp.tenant, cp.key), another
// tenant (cp.other), an admin key and a revoked key of the owner tenant.
type authzPlane struct {
	*controlPlane
	kms          *localkms.KMS
	admin        string
	revoked      string
	otherSandbox string // a running sandbox of the other tenant
	otherToken   string // its E2B access token
	spare        string // a node the node rows drain, so n1 keeps placing
	metricsToken string
	serial       atomic.Int64
}

func newAuthzPlane(t *testing.T) *authzPlane {
	t.Helper()
	dir := t.TempDir()
	backend, audit, sealer := credentialStores(t, dir)
	keys, err := localkms.Open(filepath.Join(dir, "kms"))
	if err != nil {
		t.Fatal(err)
	}
	p := &authzPlane{kms: keys, metricsToken: strings.Repeat("m", 40)}
	p.controlPlane = newControlPlane(t, Config{Credentials: credentials.NewManager(backend, audit), CredentialStore: backend,
		CredentialAudit: audit, CASealer: sealer, KMS: keys, MetricsToken: p.metricsToken})
	p.node.guest.Store(true)
	p.admin = p.adminKey()
	row, revoked, err := service.MintKey(t.Context(), p.st, p.tenant, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.st.RevokeAPIKey(t.Context(), row.ID, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	p.revoked = revoked
	var theirs sandboxv1.Sandbox
	if code, e := p.do(p.other, http.MethodPost, "/v1/sandboxes", `{"template":"minimal","cpus":1,"memory_mib":256}`, &theirs); code != http.StatusCreated {
		t.Fatalf("the other tenant's sandbox: HTTP %d %+v", code, e)
	}
	p.otherSandbox = theirs.ID
	p.otherToken = p.with(t).e2bTokenOf(theirs.ID)
	p.spare = "matrix-spare"
	p.credentialOf(p.spare)
	p.keepAlive(t)
	return p
}

// keepAlive heartbeats n1, reporting the executions its fake node runs,
// and the spare node, every 500 ms until the test ends: the matrix runs
// longer than a node may stay silent.
func (p *authzPlane) keepAlive(t *testing.T) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			for id, hb := range map[string]testHeartbeat{
				"n1":    {Address: p.nodeAddr, Token: "node-token", Executions: p.node.running()},
				p.spare: {Address: "127.0.0.1:9", Token: "token-" + p.spare},
			} {
				// The spare node offers no ns runtime: nothing is placed on it.
				hb.Runtimes, hb.CPUs, hb.MemoryMiB, hb.DiskMiB = []string{"ns"}, 64, 1<<20, 1<<30
				if id == p.spare {
					hb.Runtimes = []string{"vm"}
				}
				_, _ = heartbeatVia(context.Background(), nil, p.url, id, hb)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// fixture makes a fresh set of the owner's resources for one row.
func (p *authzPlane) fixture(t *testing.T) authzFixture {
	t.Helper()
	cp := p.with(t)
	ctx := t.Context()
	n := p.serial.Add(1)
	sb := cp.create(`{"template":"minimal","cpus":1,"memory_mib":256}`)
	f := authzFixture{sandbox: sb.ID, node: p.spare, token: cp.e2bToken(sb.ID)}
	for _, body := range []string{`{"port":3000}`, `{"port":2222,"protocol":"tcp"}`} {
		if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/ports", body, nil); code != http.StatusCreated {
			t.Fatalf("expose %s: HTTP %d %+v", body, code, e)
		}
	}
	snap := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: cp.tenant, Kind: store.SnapshotDisk, Tier: "manual",
		State: store.SnapshotReady, Node: "n1", Runtime: "ns", Template: "minimal", CPUs: 1, MemoryMiB: 256, Generation: 1, CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	f.snapshot = snap.ID
	var cred sandboxv1.Credential
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/credentials", credentialBody, &cred); code != http.StatusCreated {
		t.Fatalf("credential: HTTP %d %+v", code, e)
	}
	f.credential = cred.ID
	key, _, err := service.MintKey(ctx, cp.st, cp.tenant, false)
	if err != nil {
		t.Fatal(err)
	}
	f.key = key.ID
	f.template = fmt.Sprintf("matrix-%d", n)
	if err := cp.st.CreateTemplate(ctx, store.Template{Name: f.template, Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: f.template, CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	f.tenant = tn.ID
	if f.encKey, err = p.kms.CreateKey(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	return f
}

// missing is f with every owner id replaced by a fresh one nothing has.
func missing(f authzFixture) authzFixture {
	f.sandbox, f.snapshot, f.credential, f.key = sandbox.NewID(), sandbox.NewSnapshotID(), "cr-"+sandbox.NewID(), apikey.New().ID
	return f
}

// e2bToken is sandbox id's E2B envd access token, as its create answered.
func (cp *controlPlane) e2bToken(id string) string {
	cp.t.Helper()
	var got struct {
		Token string `json:"envdAccessToken"`
	}
	code, e := cp.do(cp.key, http.MethodPost, E2BPathPrefix+"/sandboxes/"+id+"/connect", `{"timeout":300}`, &got)
	if code >= 300 || got.Token == "" {
		cp.t.Fatalf("E2B connect %s: HTTP %d %+v", id, code, e)
	}
	return got.Token
}

// send sends r as principal who and returns the answer.
func (p *authzPlane) send(t *testing.T, f authzFixture, who principal, r authzReq) answer {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, p.url+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if r.host != "" {
		req.Host = r.host
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if r.websocket {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	if r.upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", r.upgrade)
	}
	if r.dataPlane {
		tok := [principals]string{"", "garbage-token", p.key, p.otherToken, f.token, p.admin}[who]
		if tok != "" {
			req.Header.Set(e2bapi.TokenHeader, tok)
		}
	} else if cred := [principals]string{"", "garbage-key-0123456789", p.revoked, p.other, p.key, p.admin}[who]; cred != "" {
		if r.e2b {
			req.Header.Set("X-API-Key", cred)
		} else {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// e2bTokenOf is the access token of sandbox id (of any tenant).
func (cp *controlPlane) e2bTokenOf(id string) string {
	cp.t.Helper()
	var got struct {
		Token string `json:"envdAccessToken"`
	}
	if code, e := cp.do(cp.other, http.MethodPost, E2BPathPrefix+"/sandboxes/"+id+"/connect", `{"timeout":300}`, &got); code >= 300 || got.Token == "" {
		cp.t.Fatalf("E2B connect %s: HTTP %d %+v", id, code, e)
	}
	return got.Token
}

// check fails unless a answers cell want for who.
func (f authzFixture) check(t *testing.T, who principal, want int, a answer) {
	t.Helper()
	what := principalNames[who]
	switch want {
	case allowed, listed:
		if a.status == 401 || a.status == 403 || a.status == 404 {
			t.Errorf("%s: HTTP %d %.200s, want it authorized", what, a.status, a.body)
		}
		if want == listed {
			for _, id := range []string{f.sandbox, f.credential, f.key, f.snapshot} {
				if strings.Contains(a.body, id) {
					t.Errorf("%s: the answer names the owner's %s: %.300s", what, id, a.body)
				}
			}
		}
	default:
		if a.status != want {
			t.Errorf("%s: HTTP %d %.200s, want %d", what, a.status, a.body, want)
		}
	}
	// A refusal never shows the resource it refused.
	if a.status == 401 || a.status == 403 || a.status == 404 {
		if strings.Contains(a.body, f.token) || strings.Contains(a.body, "matrix-secret") {
			t.Errorf("%s: the refusal shows a secret: %.300s", what, a.body)
		}
	}
}

// normalised is body with each id replaced by its name, so that the 404 of
// another tenant's resource and of a missing one can be compared bytewise.
func normalised(body string, ids ...string) string {
	for i, id := range ids {
		if id != "" {
			body = strings.ReplaceAll(body, id, fmt.Sprintf("{id%d}", i))
		}
	}
	return body
}

// TestAuthzMatrix runs every row against every principal on a fresh
// fixture, the principals that must be refused first. For every row whose
// owner cell is allowed and other tenants get 404 (G-3), it also compares
// that 404 with the owner's own 404 for ids that do not exist: same
// status, same body but for the id, same headers that describe the body.
func TestAuthzMatrix(t *testing.T) {
	p := newAuthzPlane(t)
	cells := 0
	for _, row := range authzRows {
		name := row.pattern
		if name == "" {
			name = row.name
		}
		t.Run(name, func(t *testing.T) {
			f := p.fixture(t)
			order := []principal{anonymous, garbageKey, revokedKey, otherTenant, adminKey, owner}
			if row.want[adminKey] == allowed {
				order = []principal{anonymous, garbageKey, revokedKey, otherTenant, owner, adminKey}
			}
			var foreign *answer
			for _, who := range order {
				a := p.send(t, f, who, row.req(f))
				f.check(t, who, row.want[who], a)
				if who == otherTenant && row.want[who] == 404 {
					foreign = &a
				}
				cells++
			}
			if foreign != nil && row.want[owner] == allowed && !row.req(f).dataPlane {
				m := missing(f)
				a := p.send(t, m, owner, row.req(m))
				got, want := normalised(a.body, m.ids()...), normalised(foreign.body, f.ids()...)
				if a.status != foreign.status || got != want || a.header.Get("Content-Type") != foreign.header.Get("Content-Type") {
					t.Errorf("another tenant's resource answers HTTP %d %q (%s), a missing one HTTP %d %q (%s): want them identical",
						foreign.status, want, foreign.header.Get("Content-Type"), a.status, got, a.header.Get("Content-Type"))
				}
				cells++
			}
			p.cleanup(t, f)
		})
	}
	t.Logf("authorization matrix: %d rows, %d cells", len(authzRows), cells)
}

// cleanup undrains the node a row may have drained, and deletes the
// sandboxes the row's creates made, so that the listings stay short.
func (p *authzPlane) cleanup(t *testing.T, f authzFixture) {
	t.Helper()
	p.with(t).do(p.admin, http.MethodPost, "/v1/nodes/"+f.node+"/undrain", "", nil)
}

// TestAuthzMatrixCoversRoutes: the matrix has exactly one row per route the
// server registers, and no row for a route it does not.
func TestAuthzMatrixCoversRoutes(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, registered := New(Config{}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil))).handler()
	rows := map[string]int{}
	for _, row := range authzRows {
		if row.pattern != "" {
			rows[row.pattern]++
		}
	}
	for _, pattern := range registered {
		if rows[pattern] == 0 {
			t.Errorf("route %q has no row in the authorization matrix (authz_test.go): add one", pattern)
		}
	}
	for pattern, n := range rows {
		if !slices.Contains(registered, pattern) {
			t.Errorf("the matrix has a row for %q, which the server does not register", pattern)
		}
		if n > 1 {
			t.Errorf("the matrix has %d rows for %q", n, pattern)
		}
	}
}

// TestMetricsAccess: GET /metrics answers the configured scrape token and
// admin keys; a wrong token of the same length, a tenant key and nobody
// are refused, and an unset token opens nothing.
func TestMetricsAccess(t *testing.T) {
	p := newAuthzPlane(t)
	get := func(auth string) answer {
		req, _ := http.NewRequest(http.MethodGet, p.url+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, body: string(b)}
	}
	for _, who := range []string{p.metricsToken, p.admin} {
		if a := get(who); a.status != http.StatusOK || !strings.Contains(a.body, "space_sandboxes{") {
			t.Errorf("scrape with %.6s…: HTTP %d %.200s, want the metrics", who, a.status, a.body)
		}
	}
	for who, want := range map[string]int{"": 401, strings.Repeat("n", len(p.metricsToken)): 401, p.metricsToken[:20]: 401, p.key: 403} {
		if a := get(who); a.status != want || strings.Contains(a.body, "space_") {
			t.Errorf("scrape with %q: HTTP %d %.200s, want %d without metrics", who, a.status, a.body, want)
		}
	}
	// With no token configured, an empty bearer is no token (HTTP trims
	// "Bearer " to "Bearer", so this is checked below the handler).
	if (&Server{}).metricsTokenValid("") {
		t.Error("an empty token opens /metrics on a server with no token configured")
	}
	if err := ValidMetricsToken("short"); err == nil {
		t.Error("a 5-byte metrics token was accepted")
	}
	if err := ValidMetricsToken(strings.Repeat("a", 31) + " "); err == nil {
		t.Error("a metrics token with a space was accepted")
	}
}

// consoleCells is what everyone gets from the console: its page, or 503
// from a binary built without its assets.
func consoleCells() [principals]int {
	if console.Built() {
		return public
	}
	return [principals]int{503, 503, 503, 503, 503, 503}
}
