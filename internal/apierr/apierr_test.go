package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// cases is every class alone and every reason, each wrapped as an error
// site wraps it.
func cases() []error {
	var out []error
	for _, c := range errdefs.Classes() {
		out = append(out, c)
		for _, r := range errdefs.Reasons() {
			if errdefs.ClassOf(r) == c {
				out = append(out, r)
			}
		}
	}
	return out
}

// TestRoundTrip: on both edges, encoding an error of a class (alone or with
// each of its reasons) and decoding the answer gives the same class and the
// same reason, whatever wraps it.
func TestRoundTrip(t *testing.T) {
	for _, edge := range []Edge{ControlPlane, Node} {
		for _, sentinel := range cases() {
			class, reason := errdefs.ClassOf(sentinel), errdefs.ReasonOf(sentinel)
			err := fmt.Errorf("sandbox sb1: start: %w", fmt.Errorf("%w: details", sentinel))
			status, code, gotReason := Encode(edge, err)
			if status == http.StatusInternalServerError || code == sandboxv1.CodeInternal {
				t.Errorf("edge %d: %v answered %d %q, want the table's answer", edge, err, status, code)
				continue
			}
			if gotReason != reason {
				t.Errorf("edge %d: %v carries reason %q, want %q", edge, err, gotReason, reason)
			}
			back := fmt.Errorf("node: %w", Decode(code, gotReason))
			if got := errdefs.ClassOf(back); got != class {
				t.Errorf("edge %d: %v -> %d %q %q -> class %v, want %v", edge, err, status, code, gotReason, got, class)
			}
			if got := errdefs.ReasonOf(back); got != reason {
				t.Errorf("edge %d: %v -> %d %q %q -> reason %q, want %q", edge, err, status, code, gotReason, got, reason)
			}
			if reason != "" && !errors.Is(back, sentinel) {
				t.Errorf("edge %d: decoded %v does not match the sentinel %q", edge, back, reason)
			}
		}
	}
}

// TestEveryReasonHasARow: a reason added to errdefs without a row here
// would be answered as its class and lose its reason.
func TestEveryReasonHasARow(t *testing.T) {
	for _, r := range errdefs.Reasons() {
		found := false
		for _, row := range table {
			found = found || row.err == r
		}
		if !found {
			t.Errorf("reason %q has no row in the table", errdefs.ReasonOf(r))
		}
	}
}

// TestPublicAnswers pins what a REST client sees for each case.
func TestPublicAnswers(t *testing.T) {
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		nodeStatus int
		nodeCode   string
	}{
		{errdefs.ErrInvalidArgument, 400, "invalid_argument", 400, "invalid_argument"},
		{errdefs.ErrUnauthenticated, 401, "unauthenticated", 401, "unauthenticated"},
		{errdefs.ErrPermissionDenied, 403, "permission_denied", 403, "permission_denied"},
		{errdefs.ErrNotFound, 404, "not_found", 404, "not_found"},
		{errdefs.ErrConflict, 409, "conflict", 409, "conflict"},
		{errdefs.ErrFailedPrecondition, 409, "failed_precondition", 409, "failed_precondition"},
		{errdefs.ErrResourceExhausted, 503, "resource_exhausted", 503, "resource_exhausted"},
		{errdefs.ErrUnavailable, 503, "unavailable", 503, "unavailable"},
		{errdefs.ErrTooLarge, 413, "too_large", 413, "too_large"},
		{errdefs.ErrNotImplemented, 501, "not_implemented", 501, "not_implemented"},
		{errdefs.ErrTemplateMissing, 409, "failed_precondition", 409, "failed_precondition"},
		{errdefs.ErrRefreshRoute, 503, "refresh_route", 409, "refresh_route"},
		{errdefs.ErrClockSkew, 503, "unavailable", 503, "clock_disagrees"},
		{errdefs.ErrRateLimited, 429, "rate_limited", 429, "rate_limited"},
		{errdefs.ErrQuotaExceeded, 429, "resource_exhausted", 429, "resource_exhausted"},
		{errdefs.ErrNoCapacity, 503, "unavailable", 503, "unavailable"},
		{errors.New("no class"), 500, "internal", 500, "internal"},
	} {
		if status, code, _ := Encode(ControlPlane, tc.err); status != tc.status || code != tc.code {
			t.Errorf("control plane: %v = %d %q, want %d %q", tc.err, status, code, tc.status, tc.code)
		}
		if status, code, _ := Encode(Node, tc.err); status != tc.nodeStatus || code != tc.nodeCode {
			t.Errorf("node: %v = %d %q, want %d %q", tc.err, status, code, tc.nodeStatus, tc.nodeCode)
		}
	}
}

// TestDecodeOlderAndUnknown: an answer without a reason (a peer older than
// reasons) decodes by its code; an unknown code or reason decodes to no
// class, an unknown reason falls back to its code.
func TestDecodeOlderAndUnknown(t *testing.T) {
	for _, tc := range []struct {
		code   string
		reason errdefs.Reason
		want   error
	}{
		{"refresh_route", "", errdefs.ErrRefreshRoute},
		{"clock_disagrees", "", errdefs.ErrClockSkew},
		{"too_large", "", errdefs.ErrTooLarge},
		{"rate_limited", "", errdefs.ErrRateLimited},
		{"unavailable", "", errdefs.ErrUnavailable},
		{"resource_exhausted", "", errdefs.ErrResourceExhausted},
		{"failed_precondition", "", errdefs.ErrFailedPrecondition},
		{"unavailable", "from_the_future", errdefs.ErrUnavailable},
		{"internal", "", nil},
		{"", "", nil},
		{"nonsense", "nonsense", nil},
	} {
		if got := Decode(tc.code, tc.reason); got != tc.want {
			t.Errorf("Decode(%q, %q) = %v, want %v", tc.code, tc.reason, got, tc.want)
		}
	}
	if err := fmt.Errorf("x: %w", Decode("nonsense", "")); errdefs.ClassOf(err) != nil {
		t.Errorf("an unknown code decoded to class %v", errdefs.ClassOf(err))
	}
	if status, code, _ := Encode(Node, fmt.Errorf("x: %w", Decode("nonsense", ""))); status != 500 || code != "internal" {
		t.Errorf("an unknown code is answered again as %d %q, want 500 internal", status, code)
	}
}

// TestOpenAPIListsTheTable: the public document names every code the
// control plane answers with and every reason.
func TestOpenAPIListsTheTable(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code, Reason struct {
							Enum []string `json:"enum"`
						}
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(sandboxv1.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	props := doc.Components.Schemas.Error.Properties
	for _, r := range table {
		if !slices.Contains(props.Code.Enum, r.cp.code) {
			t.Errorf("openapi.json: Error.code does not list %q", r.cp.code)
		}
	}
	for _, r := range errdefs.Reasons() {
		if !slices.Contains(props.Reason.Enum, string(errdefs.ReasonOf(r))) {
			t.Errorf("openapi.json: Error.reason does not list %q", errdefs.ReasonOf(r))
		}
	}
}
