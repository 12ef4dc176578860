package service

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestMissingTemplate: a create of the code-interpreter template before it
// is built says how to build it; others point at the template list.
func TestMissingTemplate(t *testing.T) {
	err := missingTemplate(errdefs.ErrInvalidArgument, "code-interpreter")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "space template build code-interpreter --from builtin:code-interpreter") {
		t.Errorf("code-interpreter: %v", err)
	}
	err = missingTemplate(errdefs.ErrInvalidArgument, "mine")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `template "mine" does not exist; `+"`space template list`") {
		t.Errorf("mine: %v", err)
	}
}
