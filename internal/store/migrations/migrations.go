// Package migrations holds SPACE's database schema as numbered SQL files,
// shared by every store backend. A file is named NNNN_description.sql; numbers
// start at 1 and have no gaps. A released file never changes: a schema change
// is a new file.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Migration is one schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns every migration in version order. It fails only if the embedded
// files are misnamed, which a test catches.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		m, err := parse(e.Name())
		if err != nil {
			return nil, err
		}
		body, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		m.SQL = string(body)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: %s: want version %d (no gaps or duplicates)", m.Name, i+1)
		}
	}
	return out, nil
}

func parse(filename string) (Migration, error) {
	base, ok := strings.CutSuffix(filename, ".sql")
	num, _, ok2 := strings.Cut(base, "_")
	if !ok || !ok2 || len(num) != 4 {
		return Migration{}, fmt.Errorf("migrations: %q: want NNNN_description.sql", filename)
	}
	v, err := strconv.Atoi(num)
	if err != nil || v < 1 {
		return Migration{}, fmt.Errorf("migrations: %q: bad version number", filename)
	}
	return Migration{Version: v, Name: base}, nil
}
