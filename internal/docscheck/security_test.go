// Package docscheck keeps the project's documents true to the tree: the
// tests docs/SECURITY.md names as a defence's proof exist where it says.
package docscheck

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testRef is a test named in the catalogue's table: `pkg.TestName`,
// `pkg.FuzzName` or `pkg.BenchmarkName`, pkg being the last element of the
// package's directory (a subtest after a slash is not checked).
var testRef = regexp.MustCompile("`([a-z0-9-]+)\\.((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)")

// TestSecurityTableNamesRealTests fails for every test docs/SECURITY.md
// names that no package of that name defines, so that a rename or a move
// cannot leave a row claiming a proof that is gone.
// pkgClause finds a Go file's package clause.
var pkgClause = regexp.MustCompile(`(?m)^package ([a-z0-9_]+)`)

func TestSecurityTableNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "SECURITY.md"))
	if err != nil {
		t.Fatal(err)
	}
	// defined maps "pkg.Name" to true for every test function of the tree.
	defined := map[string]bool{}
	fn := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// A test is named by its directory (the usual case) or by its
		// package clause where the two differ (sdk/go is package space).
		pkgs := []string{filepath.Base(filepath.Dir(path))}
		if m := pkgClause.FindSubmatch(src); m != nil {
			pkgs = append(pkgs, strings.TrimSuffix(string(m[1]), "_test"))
		}
		for _, m := range fn.FindAllSubmatch(src, -1) {
			for _, pkg := range pkgs {
				defined[pkg+"."+string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refs := testRef.FindAllSubmatch(doc, -1)
	if len(refs) < 50 {
		t.Fatalf("found only %d test references in docs/SECURITY.md; has its format changed?", len(refs))
	}
	for _, m := range refs {
		name := string(m[1]) + "." + string(m[2])
		if !defined[name] {
			line := 1 + bytes.Count(doc[:bytes.Index(doc, m[0])], []byte("\n"))
			t.Errorf("docs/SECURITY.md:%d names %s, which no package %s defines", line, name, m[1])
		}
	}
}

// TestFuzzCorpusHasItsTarget fails for a corpus directory
// (testdata/fuzz/NAME) whose package defines no fuzz target NAME: a target
// that moved to another package left its corpus behind, which `go test` then
// never replays.
func TestFuzzCorpusHasItsTarget(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "*", "testdata", "fuzz", "*"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(root, "*", "*", "*", "testdata", "fuzz", "*"))
	more2, _ := filepath.Glob(filepath.Join(root, "*", "testdata", "fuzz", "*"))
	dirs = append(append(dirs, more...), more2...)
	if len(dirs) == 0 {
		t.Fatal("no fuzz corpus found under the tree")
	}
	for _, dir := range dirs {
		pkg := filepath.Dir(filepath.Dir(filepath.Dir(dir)))
		target := filepath.Base(dir)
		tests, _ := filepath.Glob(filepath.Join(pkg, "*_test.go"))
		found := false
		for _, f := range tests {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(src, []byte("\nfunc "+target+"(")) {
				found = true
				break
			}
		}
		if !found {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("%s: its package defines no fuzz target %s; move the corpus with the target", rel, target)
		}
	}
}
