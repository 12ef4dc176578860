package e2bapi

import "github.com/spacesandbox/space/internal/template"

// e2bTemplate is the SPACE template an E2B create names: the name itself,
// or the code-interpreter template for the names E2B's code-interpreter
// SDKs create from by default ("code-interpreter-v1"), so that their
// Sandbox.create() with no template works.
func e2bTemplate(id string) string {
	if template.IsCodeInterpreterAlias(id) {
		return template.CodeInterpreterName
	}
	return id
}
