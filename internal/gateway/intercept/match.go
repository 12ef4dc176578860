package intercept

import (
	"fmt"
	"slices"

	"github.com/spacesandbox/space/internal/errdefs"
)

// matcher finds every occurrence of a fixed set of byte patterns in one
// pass (Aho–Corasick). It is immutable once built and shared by every
// stream of a session.
//
// The automaton is a trie of the patterns with failure links. Input bytes
// are mapped to classes first (every byte that appears in no pattern is
// class 0), so the transition table of a small automaton can be dense:
// states × classes entries, one lookup per input byte. An automaton too
// large for that (secrets of many kilobytes) keeps the trie's sparse edges
// and follows failure links instead: the same answers, more work per byte.
type matcher struct {
	class  [256]uint16
	nclass int
	// starts marks the bytes that begin some pattern: from the root
	// state, the scan skips every other byte without a table lookup.
	starts [256]bool
	maxLen int

	depth []int32 // length of the string a state stands for
	fail  []int32
	// outLen is the length of the longest pattern that is a suffix of the
	// state's string (0: none), and outID the id of that pattern.
	outLen []int32
	outID  []int32
	edges  [][]edge // trie children, sorted by class
	// dense holds states*nclass transitions, nil for a sparse automaton.
	// An entry is the next state's row offset (state*nclass), bit-inverted
	// when that state has an output, so the scan loop does one load, one
	// add and one sign test per byte.
	dense []int32
}

type edge struct {
	class uint16
	next  int32
}

// maxDenseEntries bounds the dense transition table (4 bytes an entry).
const maxDenseEntries = 1 << 18

// maxMatcherStates bounds the automaton, the sum of the patterns' lengths,
// and so the memory of one connection's redactor (about 50 bytes a state):
// a secret of some 100 KiB of letters and digits, or 10 KiB of
// punctuation (which every escaping writes differently), far more than API
// keys, tokens and JWTs need. A secret past it is not used (502).
const maxMatcherStates = 1 << 20

// newMatcher builds a matcher for patterns; ids[i] is reported for
// patterns[i]. Empty patterns are refused: they would match everywhere.
func newMatcher(patterns [][]byte, ids []int) (*matcher, error) {
	m := &matcher{}
	total := 1
	for _, p := range patterns {
		if len(p) == 0 {
			return nil, fmt.Errorf("redaction pattern is empty: %w", errdefs.ErrInvalidArgument)
		}
		total += len(p)
		m.maxLen = max(m.maxLen, len(p))
	}
	if total > maxMatcherStates {
		return nil, fmt.Errorf("redaction patterns total %d bytes, more than %d: %w", total, maxMatcherStates, errdefs.ErrResourceExhausted)
	}
	m.nclass = 1
	for _, p := range patterns {
		for _, b := range p {
			if m.class[b] == 0 {
				m.class[b] = uint16(m.nclass)
				m.nclass++
			}
		}
	}
	m.addState(0)
	for _, p := range patterns {
		m.starts[p[0]] = true
	}
	for i, p := range patterns {
		s := int32(0)
		for _, b := range p {
			s = m.child(s, m.class[b], true)
		}
		if m.outLen[s] == 0 {
			m.outLen[s], m.outID[s] = int32(len(p)), int32(ids[i])
		}
	}
	m.link()
	return m, nil
}

func (m *matcher) addState(depth int32) int32 {
	m.depth = append(m.depth, depth)
	m.fail = append(m.fail, 0)
	m.outLen = append(m.outLen, 0)
	m.outID = append(m.outID, -1)
	m.edges = append(m.edges, nil)
	return int32(len(m.depth) - 1)
}

// child returns s's trie child on class c, or -1; with add it creates it.
func (m *matcher) child(s int32, c uint16, add bool) int32 {
	es := m.edges[s]
	i, found := slices.BinarySearchFunc(es, c, func(e edge, c uint16) int { return int(e.class) - int(c) })
	if found {
		return es[i].next
	}
	if !add {
		return -1
	}
	n := m.addState(m.depth[s] + 1)
	m.edges[s] = slices.Insert(m.edges[s], i, edge{class: c, next: n})
	return n
}

// link computes the failure links and outputs breadth first, and the dense
// table when it is small enough.
func (m *matcher) link() {
	n := len(m.depth)
	dense := n*m.nclass <= maxDenseEntries
	if dense {
		m.dense = make([]int32, n*m.nclass)
	}
	queue := make([]int32, 0, n)
	for _, e := range m.edges[0] {
		queue = append(queue, e.next)
	}
	if dense {
		for _, e := range m.edges[0] {
			m.dense[int(e.class)] = e.next
		}
	}
	defer func() {
		if dense {
			for i, next := range m.dense {
				v := next * int32(m.nclass)
				if m.outLen[next] > 0 {
					v = ^v
				}
				m.dense[i] = v
			}
		}
	}()
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		f := m.fail[s]
		if m.outLen[s] == 0 {
			m.outLen[s], m.outID[s] = m.outLen[f], m.outID[f]
		}
		if dense {
			// Row s: its own children, else the failure state's row
			// (already complete: f is shallower).
			copy(m.dense[int(s)*m.nclass:int(s+1)*m.nclass], m.dense[int(f)*m.nclass:int(f+1)*m.nclass])
		}
		for _, e := range m.edges[s] {
			// The child's failure link: the longest proper suffix of
			// its string that is in the trie.
			m.fail[e.next] = m.step(f, e.class)
			if dense {
				m.dense[int(s)*m.nclass+int(e.class)] = e.next
			}
			queue = append(queue, e.next)
		}
	}
}

// step is the transition from s on class c, by trie edges and failure
// links. It only reads rows of states shallower than any unfinished one,
// so link may call it while building.
func (m *matcher) step(s int32, c uint16) int32 {
	for {
		if n := m.child(s, c, false); n >= 0 {
			return n
		}
		if s == 0 {
			return 0
		}
		s = m.fail[s]
	}
}

// next is the transition from s on input byte b, for a sparse automaton.
func (m *matcher) next(s int32, b byte) int32 {
	c := m.class[b]
	if c == 0 {
		return 0
	}
	return m.step(s, c)
}

// held is how many of the last bytes scanned in state s may still become
// part of a match: a match not yet complete started at most that far back.
func (m *matcher) held(s int32) int {
	return min(int(m.depth[s]), m.maxLen-1)
}
