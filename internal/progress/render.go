package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

// barWidth is the number of cells of a terminal bar.
const barWidth = 24

// Renderer draws Reports for a person. On a terminal it keeps one line and
// redraws it with a carriage return; elsewhere it writes one plain line per
// report that differs from the one before (no carriage returns, no escape
// sequences). Text in reports comes from the server, and from build
// output, and is made printable first: it cannot drive the terminal.
type Renderer struct {
	w     io.Writer
	tty   bool
	width int

	// mu guards the fields below.
	mu    sync.Mutex
	drawn int    // runes of the bar now on the terminal line; 0 for none
	last  string // the last plain line written
}

// NewRenderer draws on f: a bar when f is a terminal, plain lines otherwise.
func NewRenderer(f *os.File) *Renderer {
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return NewPlainRenderer(f)
	}
	width := 80
	if w, _, err := term.GetSize(fd); err == nil && w > 20 {
		width = w
	}
	return &Renderer{w: f, tty: true, width: width}
}

// RendererFor draws on w: as NewRenderer when w is an *os.File, plain lines
// otherwise.
func RendererFor(w io.Writer) *Renderer {
	if f, ok := w.(*os.File); ok {
		return NewRenderer(f)
	}
	return NewPlainRenderer(w)
}

// NewPlainRenderer writes plain lines to w.
func NewPlainRenderer(w io.Writer) *Renderer { return &Renderer{w: w} }

// NewBarRenderer redraws one bar of width columns on w, a terminal.
func NewBarRenderer(w io.Writer, width int) *Renderer {
	return &Renderer{w: w, tty: true, width: max(width, 20)}
}

// Show draws r.
func (d *Renderer) Show(r Report) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.tty {
		line := Printable(r.String())
		if line != d.last {
			d.last = line
			fmt.Fprintln(d.w, line)
		}
		return
	}
	line := truncate(Printable(bar(r)), d.width-1)
	n := utf8.RuneCountInString(line)
	pad := ""
	if d.drawn > n {
		pad = strings.Repeat(" ", d.drawn-n)
	}
	fmt.Fprint(d.w, "\r"+line+pad)
	d.drawn = n
}

// Println writes s on a line of its own, below the bar when one is drawn.
func (d *Renderer) Println(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endBar()
	fmt.Fprintln(d.w, Printable(s))
	d.last = ""
}

// Done ends the bar's line, so that what follows starts on a fresh one.
func (d *Renderer) Done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endBar()
}

func (d *Renderer) endBar() {
	if d.tty && d.drawn > 0 {
		fmt.Fprintln(d.w)
		d.drawn = 0
	}
}

// bar is r as one terminal line: "upload [#####.....]  45% 12.0 MiB of
// 40.0 MiB, 3.1 MiB/s: disk.img". Without a total it is r.String().
func bar(r Report) string {
	p := r.Percent()
	if p < 0 {
		return r.String()
	}
	full := int(p / 100 * barWidth)
	cells := strings.Repeat("#", full) + strings.Repeat(".", barWidth-full)
	s := fmt.Sprintf("%s [%s] %3.0f%% %s", r.Phase, cells, p, r.count(r.Done)+" of "+r.count(r.Total))
	if r.Rate > 0 && r.Unit == UnitBytes {
		s += ", " + Bytes(int64(r.Rate)) + "/s"
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// truncate cuts s to at most n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:max(n, 0)])
}

// Printable replaces control characters (escape sequences, carriage
// returns, newlines), format characters and invalid UTF-8 in s with '?'.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s)
}
