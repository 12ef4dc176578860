package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostileGuestOnlyWithItsTag: hostile.go, the e2e harness's abusive
// guest, is in a build only with the hostileguest tag — not in the
// release build (`make build`'s tags) nor a plain one.
func TestHostileGuestOnlyWithItsTag(t *testing.T) {
	for _, tags := range []string{"", "osusergo,netgo", "hostileguest"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-f", "{{.GoFiles}}", ".").Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v", tags, err)
		}
		has := strings.Contains(string(out), "hostile.go")
		if want := tags == "hostileguest"; has != want {
			t.Errorf("go list -tags %q: files %s; hostile.go in it: %v, want %v", tags, strings.TrimSpace(string(out)), has, want)
		}
	}
}
