package restapi

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestPageParams: limit and page_token reach the guest request; a limit out
// of 1..10,000 or a token longer than any the guest writes is refused before
// the guest is asked; no parameters leave the request unpaged (envd's).
func TestPageParams(t *testing.T) {
	for _, tt := range []struct {
		query     string
		size      uint32
		token     string
		wantError bool
	}{
		{query: "", size: 0, token: ""},
		{query: "limit=500", size: 500},
		{query: "limit=10000&page_token=abc", size: 10000, token: "abc"},
		{query: "page_token=abc", token: "abc"},
		{query: "limit=0", wantError: true},
		{query: "limit=10001", wantError: true},
		{query: "limit=-1", wantError: true},
		{query: "limit=ten", wantError: true},
		{query: "page_token=" + strings.Repeat("A", 257), wantError: true},
	} {
		r := httptest.NewRequest("GET", "/v1/sandboxes/sb/files/list?path=/x&"+tt.query, nil)
		msg := &filesystemv1.ListDirRequest{Path: "/x"}
		err := pageParams(r, msg)
		if tt.wantError {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%q: %v, want invalid argument", tt.query, err)
			}
			continue
		}
		if err != nil || msg.GetPageSize() != tt.size || msg.GetPageToken() != tt.token {
			t.Errorf("%q: page size %d, token %q, %v; want %d, %q", tt.query, msg.GetPageSize(), msg.GetPageToken(), err, tt.size, tt.token)
		}
	}
}
