// Package benchstat turns the timed operations of a benchmark into figures:
// nearest-rank percentiles, throughput, and a report of named scenarios that
// renders as a table or as JSON, together with a description of the machine
// the benchmark ran on.
//
// Percentiles use the nearest-rank method on the sorted durations: the p-th
// percentile of n samples is the sample at 1-based rank ceil(p/100 × n) (rank 1
// at least), so it is always a duration that was measured, never an
// interpolation. With one sample every percentile is that sample; ties need no
// special handling.
package benchstat

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// MiB is the number of bytes in a mebibyte.
const MiB = 1 << 20

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, which must be
// in ascending order, by the nearest-rank method. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summary is the figures of one scenario.
type Summary struct {
	// N is the number of timed operations.
	N int
	// P50, P90, P99 and Max are nearest-rank percentiles of the durations.
	P50, P90, P99, Max time.Duration
	// OpsPerSec is N divided by the wall time of the scenario.
	OpsPerSec float64
	// MiBPerSec is the data moved per second of wall time, for scenarios that
	// move a fixed amount per operation; 0 otherwise.
	MiBPerSec float64
	// CPUPerOp is the whole machine's busy CPU time during the scenario
	// divided by N (CPUTimes); meaningful only when HasCPU.
	CPUPerOp time.Duration
	// HasCPU says CPUPerOp was measured.
	HasCPU bool
}

// WithCPU returns s with busy, the machine's CPU time over its operations,
// spread over them.
func (s Summary) WithCPU(busy time.Duration) Summary {
	s.CPUPerOp, s.HasCPU = PerOp(busy, s.N), true
	return s
}

// Summarize computes the figures of durations, timed over wall. bytesPerOp is
// the data each operation moves (0 when it moves none worth reporting). The
// durations are not modified.
func Summarize(durations []time.Duration, wall time.Duration, bytesPerOp int64) Summary {
	sorted := slices.Clone(durations)
	slices.Sort(sorted)
	s := Summary{
		N:   len(sorted),
		P50: Percentile(sorted, 50),
		P90: Percentile(sorted, 90),
		P99: Percentile(sorted, 99),
		Max: Percentile(sorted, 100),
	}
	if wall > 0 {
		s.OpsPerSec = float64(s.N) / wall.Seconds()
		s.MiBPerSec = s.OpsPerSec * float64(bytesPerOp) / MiB
	}
	return s
}

// summaryJSON is the wire form of a Summary (SPEC.md: p50_ms, p90_ms, p99_ms,
// max_ms, ops_per_s, n).
type summaryJSON struct {
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
	OpsPerS float64 `json:"ops_per_s"`
	N       int     `json:"n"`
	MiBPerS float64 `json:"mib_per_s,omitempty"`
	// CPUMsPerOp is absent when the machine's CPU was not measured.
	CPUMsPerOp *float64 `json:"cpu_ms_per_op,omitempty"`
}

// ms converts d to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// round3 rounds v to three decimals.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// MarshalJSON encodes the summary with durations in milliseconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	j := summaryJSON{
		P50: ms(s.P50), P90: ms(s.P90), P99: ms(s.P99), Max: ms(s.Max),
		OpsPerS: round3(s.OpsPerSec), N: s.N, MiBPerS: round3(s.MiBPerSec),
	}
	if s.HasCPU {
		c := ms(s.CPUPerOp)
		j.CPUMsPerOp = &c
	}
	return json.Marshal(j)
}

// Scenario is one named row of a report.
type Scenario struct {
	Name    string
	Summary Summary
}

// Report is the outcome of a benchmark run: the machine and its scenarios, in
// the order they ran.
type Report struct {
	Machine   Machine
	Scenarios []Scenario
	// Notes say more of a scenario than its figures (how many creates
	// found a warm pool), keyed by scenario name.
	Notes map[string]string
	// CPU says what the CPU column is, or why it is empty.
	CPU string
	// Ratios compare scenarios with the baselines measured in the same run.
	Ratios []Ratio
}

// Ratio compares a scenario with a baseline of the same run: its p50
// latency, and its CPU per operation where both measured it, as multiples
// of the baseline's.
type Ratio struct {
	Scenario, Baseline string
	P50                float64
	CPU                float64 // 0: not measured on one side
}

// MarshalJSON encodes the ratio as {"p50": x, "cpu": y}, cpu absent when
// not measured.
func (r Ratio) MarshalJSON() ([]byte, error) {
	j := struct {
		P50 float64  `json:"p50"`
		CPU *float64 `json:"cpu,omitempty"`
	}{P50: round3(r.P50)}
	if r.CPU > 0 {
		c := round3(r.CPU)
		j.CPU = &c
	}
	return json.Marshal(j)
}

// String prints the ratio for the table: "create / unshare_chroot_spawn:
// p50 ×3.20, CPU/op ×1.50".
func (r Ratio) String() string {
	cpu := "CPU/op not measured"
	if r.CPU > 0 {
		cpu = "CPU/op ×" + strconv.FormatFloat(r.CPU, 'f', 2, 64)
	}
	return fmt.Sprintf("%s / %s: p50 ×%s, %s", r.Scenario, r.Baseline, strconv.FormatFloat(r.P50, 'f', 2, 64), cpu)
}

// Scenario returns the figures of the row named name.
func (r *Report) Scenario(name string) (Summary, bool) {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s.Summary, true
		}
	}
	return Summary{}, false
}

// Compare adds the ratio of row scenario to row baseline, when both are in
// the report and the baseline's p50 is positive; it says whether it did.
func (r *Report) Compare(scenario, baseline string) bool {
	s, ok1 := r.Scenario(scenario)
	b, ok2 := r.Scenario(baseline)
	if !ok1 || !ok2 || b.P50 <= 0 {
		return false
	}
	ratio := Ratio{Scenario: scenario, Baseline: baseline, P50: float64(s.P50) / float64(b.P50)}
	if s.HasCPU && b.HasCPU && b.CPUPerOp > 0 {
		ratio.CPU = float64(s.CPUPerOp) / float64(b.CPUPerOp)
	}
	r.Ratios = append(r.Ratios, ratio)
	return true
}

// Note attaches a remark to scenario name.
func (r *Report) Note(name, text string) {
	if r.Notes == nil {
		r.Notes = map[string]string{}
	}
	r.Notes[name] = text
}

// Add appends a scenario to the report.
func (r *Report) Add(name string, s Summary) {
	r.Scenarios = append(r.Scenarios, Scenario{Name: name, Summary: s})
}

// MarshalJSON encodes the report as {"machine": {...}, "scenarios": {name: summary}}.
func (r Report) MarshalJSON() ([]byte, error) {
	scenarios := make(map[string]Summary, len(r.Scenarios))
	for _, s := range r.Scenarios {
		scenarios[s.Name] = s.Summary
	}
	var ratios map[string]Ratio
	for _, ra := range r.Ratios {
		if ratios == nil {
			ratios = map[string]Ratio{}
		}
		ratios[ra.Scenario+"/"+ra.Baseline] = ra
	}
	return json.Marshal(struct {
		Machine   Machine            `json:"machine"`
		Scenarios map[string]Summary `json:"scenarios"`
		Notes     map[string]string  `json:"notes,omitempty"`
		CPU       string             `json:"cpu,omitempty"`
		Ratios    map[string]Ratio   `json:"ratios,omitempty"`
	}{r.Machine, scenarios, r.Notes, r.CPU, ratios})
}

// WriteTable prints the scenarios as aligned columns: scenario, n, p50, p90,
// p99 and max in milliseconds, ops/s, MiB/s where the scenario moves data,
// and the machine's CPU milliseconds per operation where measured; then the
// notes, what the CPU column is, and the ratios to the baselines.
func (r Report) WriteTable(w io.Writer) error {
	// Numbers align right; names are padded to one width so they read left-aligned.
	width := len("SCENARIO")
	for _, s := range r.Scenarios {
		width = max(width, len(s.Name))
	}
	name := func(s string) string { return fmt.Sprintf("%-*s", width, s) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join([]string{name("SCENARIO"), "N", "P50 MS", "P90 MS", "P99 MS", "MAX MS", "OPS/S", "MIB/S", "CPU MS/OP", ""}, "\t"))
	for _, s := range r.Scenarios {
		m := s.Summary
		mibs := "-"
		if m.MiBPerSec > 0 {
			mibs = strconv.FormatFloat(m.MiBPerSec, 'f', 1, 64)
		}
		cpu := "-"
		if m.HasCPU {
			cpu = msText(m.CPUPerOp)
		}
		fmt.Fprintln(tw, strings.Join([]string{
			name(s.Name), strconv.Itoa(m.N), msText(m.P50), msText(m.P90), msText(m.P99), msText(m.Max),
			strconv.FormatFloat(m.OpsPerSec, 'f', 2, 64), mibs, cpu, "",
		}, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	for _, s := range r.Scenarios {
		if note := r.Notes[s.Name]; note != "" {
			if _, err := fmt.Fprintf(w, "%s: %s\n", s.Name, note); err != nil {
				return fmt.Errorf("write table: %w", err)
			}
		}
	}
	var tail []string
	if r.CPU != "" {
		tail = append(tail, "CPU MS/OP: "+r.CPU)
	}
	for _, ra := range r.Ratios {
		tail = append(tail, "ratio "+ra.String())
	}
	for _, line := range tail {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	return nil
}

// msText prints d in milliseconds with one decimal.
func msText(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}
