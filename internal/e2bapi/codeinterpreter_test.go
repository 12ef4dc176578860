package e2bapi

import "testing"

// TestE2BTemplate: the code-interpreter SDK's default template names SPACE's
// code-interpreter template; any other name is passed on as it is.
func TestE2BTemplate(t *testing.T) {
	for in, want := range map[string]string{
		"code-interpreter-v1": "code-interpreter",
		"code-interpreter":    "code-interpreter",
		"base":                "base",
		"Code-Interpreter-V1": "Code-Interpreter-V1",
		"code-interpreter-v2": "code-interpreter-v2",
		"":                    "",
	} {
		if got := e2bTemplate(in); got != want {
			t.Errorf("e2bTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}
