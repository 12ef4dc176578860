// Package metrics is SPACE's one Prometheus exposition: counters with
// labels, histograms, and writers for values computed at scrape time, in the
// text format (version 0.0.4) that Prometheus scrapes.
//
// It is not github.com/prometheus/client_golang on purpose. The control
// plane and the node expose a few dozen series of their own; the client
// would add several modules to both binaries (client_model, common, procfs,
// perks; the node's binary is meant to stay small), a default registry that
// is a package global, and the go_* and process_* series, which
// node_exporter or cAdvisor already give per host and per container. Each component owns its metrics (no globals here) and
// writes them from its own handler; families are written in the order the
// handler asks for, series sorted by label values.
package metrics

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// ContentType is the Content-Type of the exposition.
const ContentType = "text/plain; version=0.0.4"

// CounterVec is a family of counters told apart by label values. It is
// safe for concurrent use.
type CounterVec struct {
	name, help string
	labels     []string

	mu     sync.Mutex        // guards counts
	counts map[string]uint64 // label values joined by NUL -> count
	always []string          // keys written even at zero
}

// NewCounterVec returns a counter family with the given label names.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	return &CounterVec{name: name, help: help, labels: labels, counts: map[string]uint64{}}
}

// Always makes the family write the series of each of values (of a
// one-label family) even while it is zero, so that a rate over it is
// defined from the first scrape. It returns c.
func (c *CounterVec) Always(values ...string) *CounterVec {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.always = append(c.always, values...)
	return c
}

// Inc adds one to the series of values, one per label.
func (c *CounterVec) Inc(values ...string) {
	k := c.key(values)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[k]++
}

// Value returns the count of the series of values.
func (c *CounterVec) Value(values ...string) uint64 {
	k := c.key(values)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}

func (c *CounterVec) key(values []string) string {
	if len(values) != len(c.labels) {
		panic(fmt.Sprintf("metrics: %s: %d label values for labels %v", c.name, len(values), c.labels))
	}
	return strings.Join(values, "\x00")
}

// Write writes the family.
func (c *CounterVec) Write(w io.Writer) {
	c.mu.Lock()
	counts := make(map[string]uint64, len(c.counts)+len(c.always))
	for _, k := range c.always {
		counts[k] = 0
	}
	for k, v := range c.counts {
		counts[k] = v
	}
	c.mu.Unlock()
	writeFamily(w, c.name, c.help, "counter", c.labels, counts)
}

// WriteCounter writes a one-label counter family whose counts are kept
// elsewhere (another process, an atomic): the series of always are written
// even at zero.
func WriteCounter(w io.Writer, name, help, label string, always []string, counts map[string]uint64) {
	all := make(map[string]uint64, len(counts)+len(always))
	for _, k := range always {
		all[k] = 0
	}
	for k, v := range counts {
		all[k] = v
	}
	writeFamily(w, name, help, "counter", []string{label}, all)
}

// WriteGaugeVec writes a one-label gauge family.
func WriteGaugeVec[V int | uint64 | float64](w io.Writer, name, help, label string, values map[string]V) {
	writeFamily(w, name, help, "gauge", []string{label}, values)
}

// WriteGauge writes a gauge without labels.
func WriteGauge[V int | uint64 | float64](w io.Writer, name, help string, v V) {
	writeHeader(w, name, help, "gauge")
	fmt.Fprintf(w, "%s %s\n", name, number(v))
}

func writeFamily[V int | uint64 | float64](w io.Writer, name, help, typ string, labels []string, values map[string]V) {
	writeHeader(w, name, help, typ)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s%s %s\n", name, labelSet(labels, strings.Split(k, "\x00")), number(values[k]))
	}
}

// writeHeader writes HELP (when help is set) and TYPE.
func writeHeader(w io.Writer, name, help, typ string) {
	if help != "" {
		fmt.Fprintf(w, "# HELP %s %s\n", name, escapeHelp(help))
	}
	fmt.Fprintf(w, "# TYPE %s %s\n", name, typ)
}

// labelSet formats {a="x",b="y"}; nothing without labels.
func labelSet(labels, values []string) string {
	if len(labels) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(values[i]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// The escapes of the text format: backslash, double quote and line feed
// in label values; backslash and line feed in help.
var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

func number[V int | uint64 | float64](v V) string {
	switch x := any(v).(type) {
	case float64:
		return fmt.Sprintf("%g", x)
	default:
		return fmt.Sprintf("%d", x)
	}
}
