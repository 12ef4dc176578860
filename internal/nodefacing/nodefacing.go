// Package nodefacing serves the control plane's side of the node API
// (api/node/v1 ControlPlaneService): the heartbeats that register nodes and
// the credential resolutions of their gateways. It is a thin adapter: it
// reads the caller's bearer token and where the request came from, and calls
// the control plane's typed operations (ControlPlane); errors cross as
// connecterr makes them.
//
// It also answers the routes of node API v1 (JSON heartbeats), which a node
// older than this control plane still sends, with a refusal that says to
// upgrade the node: this control plane cannot drive such a node (see
// docs/design/architecture.md, "Node API").
package nodefacing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// ControlPlane is what the adapter calls.
type ControlPlane interface {
	// CheckJoinToken refuses (Unauthenticated) a bearer token that is not
	// the join token.
	CheckJoinToken(bearer string) error
	// CheckNodeCredential refuses (Unauthenticated) a bearer token that is
	// not node nodeID's own credential.
	CheckNodeCredential(nodeID, bearer string) error
	// NodeHeartbeat registers the node of hb (or refreshes it), records
	// what it reports and answers what it must apply.
	NodeHeartbeat(ctx context.Context, from Origin, hb *nodeapiv1.Heartbeat) (*nodeapiv1.HeartbeatReply, error)
	// ResolveNodeCredential answers node nodeID's gateway asking for the
	// credential of one request.
	ResolveNodeCredential(ctx context.Context, nodeID string, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error)
}

// Origin is where a node's request came from: the addresses of its
// connection and the name it dialled the control plane by.
type Origin struct {
	// Local is this replica's end of the connection; nil when unknown.
	Local net.Addr
	// Remote is the node's end ("HOST:PORT").
	Remote string
	// Host is the request's Host.
	Host string
}

// maxRequest bounds a node's request: a heartbeat lists every execution.
const maxRequest = 4 << 20

// Handler serves the ControlPlaneService for cp, and the v1 routes'
// refusal. Mount it at Path and at the V1 patterns.
type Handler struct {
	cp      ControlPlane
	log     *slog.Logger
	connect http.Handler
}

// Path is the prefix of the ControlPlaneService routes.
const Path = "/" + nodeapiv1connect.ControlPlaneServiceName + "/"

// New returns the adapter of cp.
func New(cp ControlPlane, log *slog.Logger) *Handler {
	h := &Handler{cp: cp, log: log}
	_, svc := nodeapiv1connect.NewControlPlaneServiceHandler(service{h},
		connect.WithInterceptors(connecterr.Interceptor()), connect.WithReadMaxBytes(maxRequest))
	h.connect = svc
	return h
}

type originKey struct{}

// ServeHTTP serves the ControlPlaneService.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(nodev1.VersionHeader, nodev1.Version)
	o := Origin{Remote: r.RemoteAddr, Host: r.Host}
	o.Local, _ = r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	h.connect.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), originKey{}, o)))
}

// bearer returns the bearer token of header.
func bearer(header http.Header) string {
	tok, _ := strings.CutPrefix(header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(tok)
}

// service is the nodeapiv1connect.ControlPlaneServiceHandler.
type service struct{ h *Handler }

func (s service) Heartbeat(ctx context.Context, req *connect.Request[nodeapiv1.Heartbeat]) (*connect.Response[nodeapiv1.HeartbeatReply], error) {
	if err := s.h.cp.CheckJoinToken(bearer(req.Header())); err != nil {
		return nil, err
	}
	from, _ := ctx.Value(originKey{}).(Origin)
	reply, err := s.h.cp.NodeHeartbeat(ctx, from, req.Msg)
	if err != nil {
		return nil, s.h.internal(req.Spec().Procedure, err)
	}
	return connect.NewResponse(reply), nil
}

func (s service) ResolveCredential(ctx context.Context, req *connect.Request[nodeapiv1.ResolveCredentialRequest]) (*connect.Response[nodeapiv1.ResolveCredentialResponse], error) {
	nodeID := req.Msg.GetNodeId()
	if err := s.h.cp.CheckNodeCredential(nodeID, bearer(req.Header())); err != nil {
		return nil, err
	}
	cred, err := s.h.cp.ResolveNodeCredential(ctx, nodeID, nodev1.ResolveCredentialFromWire(req.Msg))
	if err != nil {
		return nil, s.h.internal(req.Spec().Procedure, err)
	}
	resp := connect.NewResponse(cred.ToWire())
	resp.Header().Set("Cache-Control", "no-store")
	return resp, nil
}

// internal keeps the text of an error of no class in the log: the node gets
// only that there was one, as the REST API's callers do.
func (h *Handler) internal(procedure string, err error) error {
	if errdefs.ClassOf(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	h.log.Error("internal error", "procedure", procedure, "err", err)
	return errors.New("internal error; the control plane's log has the details")
}

// V1Heartbeat answers a node API v1 heartbeat (POST
// /internal/v1/nodes/{id}/heartbeat, JSON) from a node with the join token:
// refused, saying to upgrade the node. Without the join token it is
// refused as any unauthenticated request.
func (h *Handler) V1Heartbeat(w http.ResponseWriter, r *http.Request) {
	h.refuseV1(w, r, h.cp.CheckJoinToken(bearer(r.Header)), r.PathValue("id"))
}

// V1ResolveCredential answers a node API v1 credential resolution (POST
// /internal/v1/nodes/{node}/credentials/resolve) as V1Heartbeat does.
func (h *Handler) V1ResolveCredential(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	h.refuseV1(w, r, h.cp.CheckNodeCredential(node, bearer(r.Header)), node)
}

func (h *Handler) refuseV1(w http.ResponseWriter, r *http.Request, authErr error, node string) {
	if authErr != nil {
		writeV1Error(w, http.StatusUnauthorized, "unauthenticated", authErr.Error())
		return
	}
	h.log.Warn("a node of an older version reports: upgrade it", "node", clip(node), "remote", r.RemoteAddr)
	writeV1Error(w, http.StatusPreconditionFailed, "failed_precondition", fmt.Sprintf(
		"node %s speaks node API v1 (JSON), this control plane speaks v2 (Connect, %s): upgrade the node to the control plane's version",
		clip(node), nodeapiv1connect.ControlPlaneServiceName))
}

// writeV1Error writes the JSON error body of node API v1.
func writeV1Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(nodev1.Error{Code: code, Message: msg})
}

// clip bounds an identifier from a request for a log line or an answer.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
