package sqlstore

import (
	"strconv"
	"strings"
)

// Rebind returns query with its ? placeholders numbered $1, $2, … in order,
// as PostgreSQL wants them. A ? inside a quoted literal or identifier ('…',
// "…") is left alone; the table logic's queries need nothing more (no
// comments, no dollar-quoted strings, no ? operators, no numbered ?NNN).
func Rebind(query string) string {
	n := strings.Count(query, "?")
	if n == 0 {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 2*n)
	arg := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote closes and reopens: same result
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			arg++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(arg))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
