package server

import (
	"errors"
	"net/http"

	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/errdefs"
)

// The ingress honours the E2B port rule of sandboxes made through the E2B
// API (internal/e2bapi, traffic.go): the row for every HTTP port, and its
// traffic access token.

// e2bAnyPort is the port of the ServicePort row that stands for every HTTP
// port of a sandbox made through the E2B API.
const e2bAnyPort = e2bapi.AnyPort

// e2bTrafficHeader carries the traffic access token.
const e2bTrafficHeader = e2bapi.TrafficHeader

// e2bTrafficTokenValid reports whether token is sandbox id's traffic
// access token.
func (s *Server) e2bTrafficTokenValid(id, token string) bool {
	return s.e2bAPI.TrafficTokenValid(id, token)
}

// e2bTrafficError refuses a request to a port of a sandbox whose ports are
// private: E2B's proxy answers it 403 with its own body.
type e2bTrafficError struct {
	sandbox string
	msg     string
}

func (e *e2bTrafficError) Error() string { return e.msg }

func (e *e2bTrafficError) Unwrap() error { return errdefs.ErrPermissionDenied }

func errTrafficMissing(id string) error {
	return &e2bTrafficError{sandbox: id, msg: "sandbox " + id + " is secured with a traffic access token: send it in the e2b-traffic-access-token header (the trafficAccessToken of Sandbox.create or Sandbox.connect)"}
}

func errTrafficInvalid(id string) error {
	return &e2bTrafficError{sandbox: id, msg: "invalid e2b-traffic-access-token for sandbox " + clip(id)}
}

// writeIngressError answers an ingress error: E2B's body for a traffic
// token refusal, SPACE's {code, message} for the rest.
func (s *Server) writeIngressError(w http.ResponseWriter, r *http.Request, err error) {
	var te *e2bTrafficError
	if errors.As(err, &te) {
		writeJSON(w, http.StatusForbidden, e2bapi.ProxyError{Message: te.msg, SandboxID: te.sandbox, Code: http.StatusForbidden})
		return
	}
	s.writeError(w, r, err)
}
