package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/benchbase"
	"github.com/spacesandbox/space/internal/benchstat"
	space "github.com/spacesandbox/space/sdk/go"
)

// benchJSON is the part of `space bench -o json` the tests read.
type benchJSON struct {
	Scenarios map[string]map[string]any `json:"scenarios"`
	Notes     map[string]string         `json:"notes"`
	CPU       string                    `json:"cpu"`
}

func parseBenchJSON(t *testing.T, out string) benchJSON {
	t.Helper()
	var got benchJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	return got
}

func TestBenchSustainedLoopsAndDeletesEverything(t *testing.T) {
	s := newBenchServer()
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "sustained", "--clients", "3", "--duration", "300ms", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	got := parseBenchJSON(t, out)
	cr, del := got.Scenarios["sustained_create"], got.Scenarios["sustained_delete"]
	c := s.counts()
	if cr == nil || del == nil || len(got.Scenarios) != 2 {
		t.Fatalf("scenarios = %v, want sustained_create and sustained_delete", got.Scenarios)
	}
	if n := cr["n"].(float64); n < 3 || int(n) != c.creates || del["n"] != n {
		t.Errorf("create n %v, delete n %v, server saw %d creates; want every client's creates, each deleted", cr["n"], del["n"], c.creates)
	}
	if c.left != 0 || c.deleted != c.creates {
		t.Errorf("%d sandboxes left, %d deleted of %d; want none left", c.left, c.deleted, c.creates)
	}
	if cr["ops_per_s"].(float64) <= 0 {
		t.Errorf("creates/s = %v, want > 0", cr["ops_per_s"])
	}
	if _, ok := cr["cpu_ms_per_op"]; !ok || got.CPU == "" {
		t.Errorf("no machine CPU though the server is on this host: %s", out)
	}
	if note := got.Notes["sustained_create"]; !strings.Contains(note, "3 clients for 300ms") || !strings.HasSuffix(note, "errors: none") {
		t.Errorf("note = %q", note)
	}
}

func TestBenchSustainedCountsFailedCreatesAndReportsThem(t *testing.T) {
	s := newBenchServer()
	s.failFrom = 3
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "sustained", "--clients", "2", "--duration", "400ms")
	if code != 1 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1: creates failed", code, out, errOut)
	}
	for _, w := range []string{"sustained_create", "errors: create unavailable ×", "no capacity"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errOut, "operations failed") || !strings.Contains(errOut, "no capacity") {
		t.Errorf("stderr %q does not say what failed", errOut)
	}
	if c := s.counts(); c.left != 0 || c.creates < 3 {
		t.Errorf("%d sandboxes left after %d creates; want none left, and the failures retried", c.left, c.creates)
	}
}

// A delete that fails is counted, and the sandbox it left is deleted by the
// run's cleanup: nothing stays behind.
func TestBenchSustainedFailedDeleteIsCountedAndCleanedUp(t *testing.T) {
	s := newBenchServer()
	s.failDeletes = 2
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "sustained", "--clients", "1", "--duration", "300ms")
	if code != 1 || !strings.Contains(out, "delete unavailable ×2") || !strings.Contains(out, "node busy") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1 and the two failed deletes reported", code, out, errOut)
	}
	if c := s.counts(); c.left != 0 {
		t.Errorf("%d sandboxes left after %d creates; want the ones whose delete failed deleted at cleanup", c.left, c.creates)
	}
}

func TestBenchMachineCPUOffLeavesTheColumnOut(t *testing.T) {
	s := newBenchServer()
	fakeServer(t, s.mux(t))
	code, out, errOut := run(t, nil, "bench", "create", "--count", "2", "--machine-cpu", "off", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	got := parseBenchJSON(t, out)
	if _, ok := got.Scenarios["create"]["cpu_ms_per_op"]; ok || !strings.Contains(got.CPU, "not measured") {
		t.Errorf("--machine-cpu off: %s", out)
	}
	code, out, errOut = run(t, nil, "bench", "create", "--count", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if got := parseBenchJSON(t, out); got.Scenarios["create"]["cpu_ms_per_op"] == nil || !strings.Contains(got.CPU, "whole machine") {
		t.Errorf("auto with a loopback server: %s", out)
	}
}

func TestNewMachineCPU(t *testing.T) {
	tests := []struct {
		mode, url     string
		server, local bool
		text          string
	}{
		{"auto", "http://127.0.0.1:7070", true, true, "whole machine"},
		{"auto", "http://[::1]:7070", true, true, "whole machine"},
		{"auto", "http://localhost:7070", true, true, "whole machine"},
		{"auto", "https://space.example.com", false, true, "not on this host"},
		{"auto", "http://10.0.0.5:7070", false, true, "10.0.0.5"},
		{"on", "https://space.example.com", true, true, "whole machine"},
		{"off", "http://127.0.0.1:7070", false, false, "not measured"},
	}
	for _, tt := range tests {
		m, err := newMachineCPU(tt.mode, tt.url)
		if err != nil || m.server != tt.server || m.local != tt.local || !strings.Contains(m.text, tt.text) {
			t.Errorf("newMachineCPU(%q, %q) = %+v, %v; want server %v, local %v, text with %q", tt.mode, tt.url, m, err, tt.server, tt.local, tt.text)
		}
	}
	if _, err := newMachineCPU("sometimes", "http://127.0.0.1"); err == nil {
		t.Error("--machine-cpu sometimes: no error")
	}
}

func TestSustainedTallyClassesAndMessages(t *testing.T) {
	var tally sustainedTally
	unavailable := fmt.Errorf("create sandbox: %w", &space.APIError{Status: 503, Code: sandboxv1.CodeUnavailable, Message: "no capacity"})
	tally.record("create", 1, nil)
	tally.record("create", 1, unavailable)
	tally.record("create", 1, fmt.Errorf("second: %w", &space.APIError{Status: 503, Code: sandboxv1.CodeUnavailable, Message: "still none"}))
	tally.record("delete", 1, fmt.Errorf("wait: %w", context.DeadlineExceeded))
	tally.record("delete", 1, errors.New("connection reset"))
	tally.record("delete", 2, nil)
	if len(tally.creates) != 1 || len(tally.deletes) != 1 || tally.failed() != 4 {
		t.Fatalf("%d creates, %d deletes, %d failed; want 1, 1, 4", len(tally.creates), len(tally.deletes), tally.failed())
	}
	want := "create " + sandboxv1.CodeUnavailable + " ×2 (first: " + unavailable.Error() + "); " +
		"delete other ×1 (first: connection reset); delete timeout ×1 (first: wait: context deadline exceeded)"
	if got := tally.errorText(); got != want {
		t.Errorf("errorText =\n%q\nwant\n%q", got, want)
	}
	var none sustainedTally
	if none.errorText() != "none" || none.failed() != 0 {
		t.Errorf("empty tally: %q, %d", none.errorText(), none.failed())
	}
}

func TestBenchCompareMatchesTheRuntimesBaseline(t *testing.T) {
	for _, tt := range []struct {
		runtime string
		want    []string
	}{
		{"ns", []string{"create/" + benchbase.RowSpawn}},
		{"vm", []string{"create/" + benchbase.RowBoot, "restore/" + benchbase.RowRestore}},
	} {
		b := &bench{runtimes: map[string]bool{tt.runtime: true}}
		for _, row := range []string{"create", "exec", "restore", benchbase.RowSpawn, benchbase.RowBoot, benchbase.RowRestore} {
			b.report.Add(row, summaryOf(10))
		}
		b.compare()
		var got []string
		for _, r := range b.report.Ratios {
			got = append(got, r.Scenario+"/"+r.Baseline)
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("%s: ratios %v, want %v", tt.runtime, got, tt.want)
		}
	}
}

// summaryOf is a row of one operation of ms milliseconds.
func summaryOf(ms int) benchstat.Summary {
	return benchstat.Summarize([]time.Duration{time.Duration(ms) * time.Millisecond}, time.Second, 0)
}
