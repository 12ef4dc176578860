package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// writeTable prints rows under header as aligned columns. Cells come from the
// server and are made printable first.
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = printable(c)
			if cells[i] == "" {
				cells[i] = "-"
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// writeLine prints one value alone on a line (an id, a key, a URL).
func writeLine(w io.Writer, s string) error {
	if _, err := fmt.Fprintln(w, printable(s)); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// printable replaces control characters (terminal escapes, tabs, newlines) and
// invalid UTF-8 in text from the server with '?', so it cannot drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// formatTime prints a timestamp in UTC, or "-" for none.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeJSONLine prints v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// truncate shortens s to at most n runes, ending in "…" when it cut.
func truncate(s string, n int) string {
	r := []rune(strings.ToValidUTF8(s, "?"))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
