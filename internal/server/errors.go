package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Errors that only the API edge has.
var (
	errNoRoute        = errors.New("not found")
	errTooLarge       = errors.New("too large")
	errNotImplemented = errors.New("not implemented")
	errUnavailable    = errdefs.ErrUnavailable
)

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

func isMaxBytes(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

// statusOf maps an error to its HTTP status and API code.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, errTooLarge) || isMaxBytes(err):
		return http.StatusRequestEntityTooLarge, sandboxv1.CodeTooLarge
	case errors.Is(err, errNoRoute):
		return http.StatusNotFound, sandboxv1.CodeNotFound
	case errors.Is(err, errNotImplemented):
		return http.StatusNotImplemented, "not_implemented"
	case errors.Is(err, errRouteChanged):
		return http.StatusServiceUnavailable, sandboxv1.CodeRefreshRoute
	case isQuotaError(err):
		return http.StatusTooManyRequests, sandboxv1.CodeResourceExhausted
	}
	return apierr.Status(err)
}

// writeError answers with {code, message}. Internal errors are logged in full
// and shown to the client without their causes.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := statusOf(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; the server log has the details"
	}
	writeJSON(w, status, sandboxv1.Error{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
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
