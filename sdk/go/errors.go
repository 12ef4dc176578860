package space

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// APIError is a non-2xx answer of the server. Code is one of the sandboxv1.Code*
// values; Reason, when set, refines it with a stable name (docs/api-errors.md:
// "no_capacity", "quota_exceeded", …); Message is meant for people.
type APIError struct {
	Status  int
	Code    string
	Reason  string
	Message string
}

// Error returns the status, code and message.
func (e *APIError) Error() string {
	return fmt.Sprintf("space api: %d %s: %s", e.Status, e.Code, e.Message)
}

// IsCode reports whether err is, or wraps, an *APIError with the given code
// (sandboxv1.CodeNotFound, …).
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// IsReason reports whether err is, or wraps, an *APIError with the given
// reason ("no_capacity", …).
func IsReason(err error, reason string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Reason != "" && ae.Reason == reason
}

// IsNotFound reports whether err says the sandbox, file or object does not exist
// (or belongs to another tenant).
func IsNotFound(err error) bool { return IsCode(err, sandboxv1.CodeNotFound) }

// readAPIError turns a non-2xx response into an *APIError. It reads a bounded part
// of the body and never trusts it to be well formed.
func readAPIError(resp *http.Response) *APIError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return parseAPIError(resp.StatusCode, body)
}

// parseAPIError builds an *APIError from a status and an error body. When the
// body is not a SPACE error it keeps a cleaned, short excerpt of it and derives
// the code from the status.
func parseAPIError(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var wire sandboxv1.Error
	if json.Unmarshal(body, &wire) == nil {
		e.Code, e.Message = cleanText(wire.Code, 64), cleanText(wire.Message, 1024)
		e.Reason = cleanText(wire.Reason, 64)
	}
	if e.Code == "" {
		e.Code = codeForStatus(status)
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
		if e.Message == "" {
			e.Message = fmt.Sprintf("HTTP status %d", status)
		}
		if excerpt := cleanText(string(body), 200); excerpt != "" && wire.Message == "" {
			e.Message += " (" + excerpt + ")"
		}
	}
	return e
}

// codeForStatus maps an HTTP status to the error code SPEC.md pairs with it.
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return sandboxv1.CodeInvalidArgument
	case http.StatusUnauthorized:
		return sandboxv1.CodeUnauthenticated
	case http.StatusForbidden:
		return sandboxv1.CodePermissionDenied
	case http.StatusNotFound:
		return sandboxv1.CodeNotFound
	case http.StatusConflict:
		return sandboxv1.CodeConflict
	case http.StatusRequestEntityTooLarge:
		return sandboxv1.CodeTooLarge
	case http.StatusTooManyRequests:
		return sandboxv1.CodeRateLimited
	case http.StatusServiceUnavailable:
		return sandboxv1.CodeUnavailable
	case http.StatusPreconditionFailed:
		return sandboxv1.CodeFailedPrecondition
	}
	return sandboxv1.CodeInternal
}

// cleanText makes server-supplied text safe to show on a terminal: invalid UTF-8
// and control characters become spaces or '?', runs of space collapse, and the
// result is cut to at most max bytes.
func cleanText(s string, max int) string {
	var b strings.Builder
	space := false
	for len(s) > 0 && b.Len() < max {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == utf8.RuneError && size <= 1:
			r = '?'
		case unicode.IsSpace(r):
			if space || b.Len() == 0 {
				continue
			}
			space = true
			b.WriteByte(' ')
			continue
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			r = '?'
		}
		space = false
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimRight(b.String(), " ")
}
