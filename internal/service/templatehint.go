package service

import (
	"fmt"

	"github.com/spacesandbox/space/internal/template"
)

// missingTemplate is the error of a create naming a template that does not
// exist: what to do about it, with the build command for the built-in
// templates that are not built at start.
func missingTemplate(err error, name string) error {
	if name == template.CodeInterpreterName {
		return fmt.Errorf("%w: template %q is not built; build it once with `space template build %s --from builtin:%s` (docs/e2b.md)", err, name, name, name)
	}
	return fmt.Errorf("%w: template %q does not exist; `space template list` shows the templates", err, name)
}
