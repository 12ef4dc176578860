package bridge

import (
	"encoding/json"
	"errors"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// refusedWith reports whether an answer's error body decodes, through the
// table its readers use (internal/apierr), to want.
func refusedWith(body string, want error) bool {
	var e nodev1.Error
	if json.Unmarshal([]byte(body), &e) != nil {
		return false
	}
	return errors.Is(apierr.Decode(e.Code, errdefs.Reason(e.Reason)), want)
}
