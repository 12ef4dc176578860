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
}

// ms converts d to milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }

// round3 rounds v to three decimals.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// MarshalJSON encodes the summary with durations in milliseconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{
		P50: ms(s.P50), P90: ms(s.P90), P99: ms(s.P99), Max: ms(s.Max),
		OpsPerS: round3(s.OpsPerSec), N: s.N, MiBPerS: round3(s.MiBPerSec),
	})
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
	return json.Marshal(struct {
		Machine   Machine            `json:"machine"`
		Scenarios map[string]Summary `json:"scenarios"`
		Notes     map[string]string  `json:"notes,omitempty"`
	}{r.Machine, scenarios, r.Notes})
}

// WriteTable prints the scenarios as aligned columns: scenario, n, p50, p90,
// p99 and max in milliseconds, ops/s, and MiB/s where the scenario moves data.
func (r Report) WriteTable(w io.Writer) error {
	// Numbers align right; names are padded to one width so they read left-aligned.
	width := len("SCENARIO")
	for _, s := range r.Scenarios {
		width = max(width, len(s.Name))
	}
	name := func(s string) string { return fmt.Sprintf("%-*s", width, s) }
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join([]string{name("SCENARIO"), "N", "P50 MS", "P90 MS", "P99 MS", "MAX MS", "OPS/S", "MIB/S", ""}, "\t"))
	for _, s := range r.Scenarios {
		m := s.Summary
		mibs := "-"
		if m.MiBPerSec > 0 {
			mibs = strconv.FormatFloat(m.MiBPerSec, 'f', 1, 64)
		}
		fmt.Fprintln(tw, strings.Join([]string{
			name(s.Name), strconv.Itoa(m.N), msText(m.P50), msText(m.P90), msText(m.P99), msText(m.Max),
			strconv.FormatFloat(m.OpsPerSec, 'f', 2, 64), mibs, "",
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
	return nil
}

// msText prints d in milliseconds with one decimal.
func msText(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}
