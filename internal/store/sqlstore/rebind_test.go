package sqlstore

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE id = ?`, `SELECT a FROM t WHERE id = $1`},
		{`INSERT INTO t (a, b, c) VALUES (?, ?, ?)`, `INSERT INTO t (a, b, c) VALUES ($1, $2, $3)`},
		{`UPDATE t SET a = '?', b = ? WHERE "we?rd" = ?`, `UPDATE t SET a = '?', b = $1 WHERE "we?rd" = $2`},
		{`SELECT 'it''s ?' , ?`, `SELECT 'it''s ?' , $1`},
		{`a = ? AND b IN (?,?,?,?,?,?,?,?,?,?)`, `a = $1 AND b IN ($2,$3,$4,$5,$6,$7,$8,$9,$10,$11)`},
	} {
		if got := Rebind(tc.in); got != tc.want {
			t.Errorf("Rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// numberedPlaceholder matches SQLite's ?NNN, which Rebind does not take.
var numberedPlaceholder = regexp.MustCompile(`\?[0-9]`)

// FuzzRebind checks that Rebind only ever turns a ? into the next $n: with
// the numbers taken out again, the query is what it was.
func FuzzRebind(f *testing.F) {
	f.Add(`SELECT a FROM t WHERE id = ? AND b = '?'`)
	f.Add(`UPDATE t SET a = "q?" , b = ? WHERE c = 'it''s'`)
	f.Add(`'unterminated ?`)
	f.Fuzz(func(t *testing.T, q string) {
		if strings.Contains(q, "$") || numberedPlaceholder.MatchString(q) {
			return // outside Rebind's contract
		}
		got := Rebind(q)
		var back strings.Builder
		next := 1
		for i := 0; i < len(got); i++ {
			if got[i] != '$' {
				back.WriteByte(got[i])
				continue
			}
			j := i + 1
			for j < len(got) && got[j] >= '0' && got[j] <= '9' {
				j++
			}
			if n, err := strconv.Atoi(got[i+1 : j]); err != nil || n != next {
				t.Fatalf("Rebind(%q) = %q: placeholder %q, want $%d", q, got, got[i:j], next)
			}
			next++
			back.WriteByte('?')
			i = j - 1
		}
		if back.String() != q {
			t.Fatalf("Rebind(%q) = %q, which is not the query with numbered placeholders", q, got)
		}
	})
}
