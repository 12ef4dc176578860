package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

func TestBenchBaselinesFlagGoesWithServerScenarios(t *testing.T) {
	code, out, errOut := run(t, nil, "bench", "baseline", "--baselines")
	if code != 2 || out != "" || !strings.Contains(errOut, "--baselines goes with the server's scenarios") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and the usage error", code, out, errOut)
	}
}

// TestBenchBaselineForReal runs `space bench baseline` once per baseline:
// no server, root and QEMU (see internal/benchbase).
func TestBenchBaselineForReal(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresTool(t, "qemu-system-x86_64", "unshare", "chroot")
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skipf("skipping: needs /bin/busybox (apt-get install busybox-static): %v", err)
	}
	// No server: the baselines must not need one.
	t.Setenv("SPACE_API_URL", "http://127.0.0.1:1")
	code, out, errOut := run(t, nil, "bench", "baseline", "--count", "1", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var got struct {
		Machine   map[string]any            `json:"machine"`
		Scenarios map[string]map[string]any `json:"scenarios"`
		Notes     map[string]string         `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, row := range []string{"unshare_chroot_spawn", "qemu_cold_boot", "qemu_snapshot_restore"} {
		s := got.Scenarios[row]
		if s["n"] != 1.0 || !(s["p50_ms"].(float64) > 0) || got.Notes[row] == "" {
			t.Errorf("%s = %v, note %q; want one positive sample and a note", row, s, got.Notes[row])
		}
	}
	// The baselines run here: the spawn and the boot have the machine's CPU;
	// the restore's rounds share the run with the untimed save, so not it.
	for row, want := range map[string]bool{"unshare_chroot_spawn": true, "qemu_cold_boot": true, "qemu_snapshot_restore": false} {
		if _, has := got.Scenarios[row]["cpu_ms_per_op"]; has != want {
			t.Errorf("%s has cpu_ms_per_op: %v, want %v", row, has, want)
		}
	}
	if len(got.Scenarios) != 3 || got.Machine["cpus"] == nil {
		t.Errorf("report = %s, want the machine and three rows", out)
	}
}
