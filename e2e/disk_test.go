package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestNSDiskQuota: an ns sandbox's disk_mib reaches its node and bounds what
// it writes, in the sandbox and in a fork of it, while a neighbour on the
// same node still writes.
func TestNSDiskQuota(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	var small sandbox
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256, "disk_mib": 256}, &small); code != http.StatusCreated {
		t.Fatalf("create with disk_mib 256: HTTP %d\n%s", code, in.logs())
	}
	defer in.delete(small.ID)
	neighbour := in.createWith("minimal", "ns")
	defer in.delete(neighbour.ID)

	const fill = "dd if=/dev/zero of=/home/user/fill bs=1M count=400 2>&1; sync"
	if res := in.exec(small.ID, "sh", "-c", fill); !strings.Contains(res.Stdout+res.Stderr, "quota exceeded") {
		t.Errorf("writing 400 MiB in a 256 MiB sandbox: exit %d %q %q, want disk quota exceeded", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := in.exec(neighbour.ID, "sh", "-c", "dd if=/dev/zero of=/home/user/x bs=1M count=64 2>/dev/null && sync && echo ok"); strings.TrimSpace(res.Stdout) != "ok" {
		t.Errorf("the neighbour of a full sandbox: exit %d %q %q, want ok", res.ExitCode, res.Stdout, res.Stderr)
	}
	// A fork of the full sandbox has the same disk size, and is bounded by it.
	forkID, e, c := in.cli("", "sandbox", "fork", small.ID)
	forkID = strings.TrimSpace(forkID)
	if c != 0 || forkID == "" {
		t.Fatalf("fork: exit %d %q %s\n%s", c, forkID, e, in.logs())
	}
	defer in.delete(forkID)
	if res := in.exec(forkID, "sh", "-c", "rm /home/user/fill; "+fill); !strings.Contains(res.Stdout+res.Stderr, "quota exceeded") {
		t.Errorf("writing 400 MiB in the fork of a 256 MiB sandbox: exit %d %q %q, want disk quota exceeded", res.ExitCode, res.Stdout, res.Stderr)
	}
}
