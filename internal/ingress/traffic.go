package ingress

import (
	"errors"
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// The ingress honours the E2B port rule of sandboxes made through the E2B
// API (internal/e2bapi, traffic.go): the ServicePort row for every HTTP
// port (service.service.AnyPort), and its traffic access token, which the E2B
// surface derives and Host.TrafficTokenValid checks. The header and the
// refusal's body are E2B's wire format, spelled here as in e2bapi (a
// test in internal/server keeps them equal), since the ingress imports no
// other surface.

// TrafficHeader carries the traffic access token (E2B's
// e2b-traffic-access-token, in canonical form).
const TrafficHeader = "E2b-Traffic-Access-Token"

// proxyError is the JSON body of E2B's proxy errors, here its 403 for a
// missing or wrong traffic token.
type proxyError struct {
	Message   string `json:"message"`
	SandboxID string `json:"sandboxId"`
	Code      int    `json:"code"`
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
	return &e2bTrafficError{sandbox: id, msg: "invalid e2b-traffic-access-token for sandbox " + service.Clip(id)}
}

// writeIngressError answers an ingress error: E2B's body for a traffic
// token refusal, SPACE's {code, message} for the rest.
func (a *Ingress) writeIngressError(w http.ResponseWriter, r *http.Request, err error) {
	var te *e2bTrafficError
	if errors.As(err, &te) {
		writeJSON(w, http.StatusForbidden, proxyError{Message: te.msg, SandboxID: te.sandbox, Code: http.StatusForbidden})
		return
	}
	a.host.WriteError(w, r, err)
}
