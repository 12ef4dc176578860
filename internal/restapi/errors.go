package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// errTooLarge refuses a body over its limit; of a reason the table
// (internal/apierr) answers.
var errTooLarge = errdefs.ErrTooLarge

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

func isMaxBytes(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

// statusOf maps an error to its HTTP status and API code (AnswerOf).
func statusOf(err error) (int, string) {
	status, code, _ := AnswerOf(err)
	return status, code
}

// AnswerOf maps an error to its HTTP status, API code and reason: the
// table's (internal/apierr), with a body over http.MaxBytesReader's limit
// too large. Every surface of the control plane answers with it.
func AnswerOf(err error) (int, string, errdefs.Reason) {
	if isMaxBytes(err) && !errors.Is(err, errdefs.ErrTooLarge) {
		err = fmt.Errorf("%w: %w", errdefs.ErrTooLarge, err)
	}
	return apierr.Encode(apierr.ControlPlane, err)
}

// writeError answers err (WriteError).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	WriteError(a.log, w, r, err)
}

// WriteError answers with {code, message, reason}. Internal errors are
// logged in full to log and shown to the client without their causes.
func WriteError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	status, code, reason := AnswerOf(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; the server log has the details"
	}
	writeJSON(w, status, sandboxv1.Error{Code: code, Message: msg, Reason: string(reason)})
}

// writeJSON answers v as JSON with status (WriteJSON).
func writeJSON(w http.ResponseWriter, status int, v any) { WriteJSON(w, status, v) }

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeJSON reads a bounded JSON body into v, refusing unknown fields and
// trailing data. The Content-Type is not checked: `curl -d` labels JSON as a
// form, and a body that is not JSON gets a clear error anyway.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > maxJSONBody {
		return fmt.Errorf("%w: body is over %d bytes", errTooLarge, maxJSONBody)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if isMaxBytes(err) {
			return fmt.Errorf("%w: body is over %d bytes", errTooLarge, maxJSONBody)
		}
		return fmt.Errorf("%w: malformed JSON body: %v", errdefs.ErrInvalidArgument, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: malformed JSON body: data after the object", errdefs.ErrInvalidArgument)
	}
	return nil
}
