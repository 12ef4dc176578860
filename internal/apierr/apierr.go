// Package apierr is SPACE's one table between errors and HTTP answers: an
// error's class and reason (internal/errdefs) give the status, the API code
// and the reason every HTTP edge answers with, and a code and reason read
// from an answer give back an error that errors.Is matches to the same class
// and the same reason. The edges are the control plane's REST API
// (internal/restapi's WriteError, which ingress and internal/server's own
// routes answer with too), the node-api (internal/node) and the host bridge's
// admission (internal/bridge); their clients (internal/nodeclient, the
// node's calls to the control plane) decode through Decode, never by
// comparing a code or a message.
//
// The table is lossless: a class alone has a code of its own, and a reason
// travels in the error body's "reason" field beside the code, so a reason
// may keep the code its answer had before reasons existed ("no_capacity" is
// 503 "unavailable" as SPEC.md promises). A few answers differ between the
// control plane and the node (the Node column); docs/api-errors.md lists
// them all.
package apierr

import (
	"encoding/json"
	"errors"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Edge is one of SPACE's HTTP edges.
type Edge int

const (
	// ControlPlane is the control plane's REST API, public and node-facing.
	ControlPlane Edge = iota
	// Node is the node-api and the host bridge, which only the control
	// plane and the node call.
	Node
)

// answer is a status and the API code beside it.
type answer struct {
	status int
	code   string
}

// row is one error: a reason's sentinel or a class, what the control
// plane answers it with, and what the node answers when that differs.
type row struct {
	err  error
	cp   answer
	node answer // zero: as cp
}

// table is checked in order and the first row err matches decides: reasons
// first (a reason's sentinel is of its class too), then the classes in the
// order that settles an error of two classes.
var table = []row{
	{err: errdefs.ErrTooLarge, cp: answer{http.StatusRequestEntityTooLarge, sandboxv1.CodeTooLarge}},
	{err: errdefs.ErrNotImplemented, cp: answer{http.StatusNotImplemented, sandboxv1.CodeNotImplemented}},
	{err: errdefs.ErrTemplateMissing, cp: answer{http.StatusConflict, sandboxv1.CodeFailedPrecondition}},
	// The node refuses a capability naming another execution with 409, as
	// it always has (the sandbox's state moved on); the control plane, once
	// it has repaired the route, tells its client a retry is safe: 503.
	{err: errdefs.ErrRefreshRoute, cp: answer{http.StatusServiceUnavailable, sandboxv1.CodeRefreshRoute},
		node: answer{http.StatusConflict, sandboxv1.CodeRefreshRoute}},
	// The public API answers a node's clock refusal as the node being
	// unavailable, which it is; the reason says why.
	{err: errdefs.ErrClockSkew, cp: answer{http.StatusServiceUnavailable, sandboxv1.CodeUnavailable},
		node: answer{http.StatusServiceUnavailable, sandboxv1.CodeClockDisagrees}},
	{err: errdefs.ErrRateLimited, cp: answer{http.StatusTooManyRequests, sandboxv1.CodeRateLimited}},
	{err: errdefs.ErrQuotaExceeded, cp: answer{http.StatusTooManyRequests, sandboxv1.CodeResourceExhausted}},
	{err: errdefs.ErrTooManyStreams, cp: answer{http.StatusTooManyRequests, sandboxv1.CodeResourceExhausted}},
	// No room is worth retrying later: 503, as SPEC.md says.
	{err: errdefs.ErrNoCapacity, cp: answer{http.StatusServiceUnavailable, sandboxv1.CodeUnavailable}},

	{err: errdefs.ErrInvalidArgument, cp: answer{http.StatusBadRequest, sandboxv1.CodeInvalidArgument}},
	{err: errdefs.ErrUnauthenticated, cp: answer{http.StatusUnauthorized, sandboxv1.CodeUnauthenticated}},
	{err: errdefs.ErrPermissionDenied, cp: answer{http.StatusForbidden, sandboxv1.CodePermissionDenied}},
	{err: errdefs.ErrNotFound, cp: answer{http.StatusNotFound, sandboxv1.CodeNotFound}},
	{err: errdefs.ErrConflict, cp: answer{http.StatusConflict, sandboxv1.CodeConflict}},
	{err: errdefs.ErrFailedPrecondition, cp: answer{http.StatusConflict, sandboxv1.CodeFailedPrecondition}},
	{err: errdefs.ErrResourceExhausted, cp: answer{http.StatusServiceUnavailable, sandboxv1.CodeResourceExhausted}},
	{err: errdefs.ErrUnavailable, cp: answer{http.StatusServiceUnavailable, sandboxv1.CodeUnavailable}},
}

// internal is the answer to an error of no class.
var internal = answer{http.StatusInternalServerError, sandboxv1.CodeInternal}

// Encode returns the status, API code and reason edge answers err with; an
// error of no class is a 500 "internal" with no reason.
func Encode(edge Edge, err error) (status int, code string, reason errdefs.Reason) {
	for _, r := range table {
		if !errors.Is(err, r.err) {
			continue
		}
		a := r.cp
		if edge == Node && r.node != (answer{}) {
			a = r.node
		}
		return a.status, a.code, errdefs.ReasonOf(r.err)
	}
	return internal.status, internal.code, ""
}

// codes maps every API code of the table to the error it decodes to when
// the answer has no reason (a peer older than reasons): a class's code to
// the class, a code only a reason answers with to the reason.
var codes = func() map[string]error {
	m := map[string]error{}
	for _, r := range table {
		for _, a := range []answer{r.cp, r.node} {
			if a.code == "" {
				continue
			}
			if _, seen := m[a.code]; !seen || errdefs.ReasonOf(r.err) == "" {
				m[a.code] = r.err
			}
		}
	}
	return m
}()

// Decode returns the error an answer with code and reason stands for: the
// reason's sentinel when this build knows the reason, else the error of the
// code; nil for "internal" and for a code it does not know. Wrap the result
// with %w (it is a sentinel) or match it with errors.Is.
func Decode(code string, reason errdefs.Reason) error {
	if r := errdefs.ReasonError(reason); r != nil {
		return r
	}
	return codes[code]
}

// DecodeBody decodes the JSON error body of one of SPACE's HTTP edges
// through the table: the error it stands for (a reason's sentinel or a
// class) and its message; nil for a body that is not such an error (a
// guest's own answer) or one of no class.
func DecodeBody(body []byte) (error, string) {
	var e sandboxv1.Error
	if json.Unmarshal(body, &e) != nil {
		return nil, ""
	}
	return Decode(e.Code, errdefs.Reason(e.Reason)), e.Message
}
