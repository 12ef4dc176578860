package restapi

import (
	"net"
	"net/http"
	"strconv"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// handleExposePort serves POST /v1/sandboxes/{id}/ports. Exposing a port
// again replaces it, and a private port gets a new token each time.
//
// The route does not honour Idempotency-Key: a remembered answer would keep
// the port's token in the database in the clear, and exposing is already
// safe to repeat (the last answer's token is the valid one).
func (a *API) handleExposePort(w http.ResponseWriter, r *http.Request) {
	if _, err := a.sandboxFor(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	var req sandboxv1.ExposePortRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	sp, token, err := a.svc.ExposePort(r.Context(), a.caller(r), r.PathValue("id"), service.ExposeParams{
		Port: req.Port, Protocol: req.Protocol, Public: req.Public,
	})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := a.apiPort(r, sp)
	out.Token = token
	writeJSON(w, http.StatusCreated, out)
}

// handleListPorts serves GET /v1/sandboxes/{id}/ports.
func (a *API) handleListPorts(w http.ResponseWriter, r *http.Request) {
	list, err := a.svc.ListPorts(r.Context(), a.caller(r), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.ServicePortList{Ports: make([]sandboxv1.ServicePort, 0, len(list))}
	for _, sp := range list {
		out.Ports = append(out.Ports, a.apiPort(r, sp))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleUnexposePort serves DELETE /v1/sandboxes/{id}/ports/{port}.
func (a *API) handleUnexposePort(w http.ResponseWriter, r *http.Request) {
	if _, err := a.sandboxFor(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.svc.UnexposePort(r.Context(), a.caller(r), r.PathValue("id"), port); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// parsePort reads a port number from a path: decimal, 1-65535.
func parsePort(s string) (int, error) { return service.ParsePort(s) }

// apiPort is what the API reports of an exposed port, with the URLs that
// reach it from the client that asked (whose Host names the API). The E2B
// rule for every HTTP port is reported as port 0, its URLs with "{port}"
// where the port goes.
func (a *API) apiPort(r *http.Request, sp store.ServicePort) sandboxv1.ServicePort {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	apiHost := r.Host
	if apiHost == "" {
		apiHost = a.cfg.Listen
	}
	out := sandboxv1.ServicePort{Port: sp.Port, Protocol: sp.Protocol, Public: sp.Public, CreatedAt: sp.CreatedAt}
	port := strconv.Itoa(sp.Port)
	if sp.Port == service.AnyPort {
		port = "{port}"
	}
	portPath := "/v1/sandboxes/" + sp.Sandbox + "/ports/" + port
	if sp.Protocol == "tcp" {
		out.URL = scheme + "://" + apiHost + portPath + "/tcp"
		return out
	}
	host := port + "-" + sp.Sandbox + "." + a.cfg.IngressDomain
	if _, apiPort, err := net.SplitHostPort(apiHost); err == nil && apiPort != "" {
		host = net.JoinHostPort(host, apiPort)
	}
	out.URL = scheme + "://" + host + "/"
	out.ProxyURL = scheme + "://" + apiHost + portPath + "/proxy/"
	return out
}
