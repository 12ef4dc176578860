package server

import (
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/restapi"
)

// The control plane answers errors the one way the REST API does
// (restapi.WriteError): its own routes (health, readiness, metrics, the
// catch-all 404) and those of ingress through ingress.Host.

// writeError answers err with {code, message, reason} (restapi.WriteError).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	restapi.WriteError(s.log, w, r, err)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) { restapi.WriteJSON(w, status, v) }

// statusOf maps an error to its HTTP status and API code.
func statusOf(err error) (int, string) {
	status, code, _ := answerOf(err)
	return status, code
}

// answerOf maps an error to its HTTP status, API code and reason
// (restapi.AnswerOf).
func answerOf(err error) (int, string, errdefs.Reason) { return restapi.AnswerOf(err) }
