package benchbase

import (
	"bytes"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spacesandbox/space/internal/guestinit"
)

// What the baseline guest's /init prints on the serial console.
const (
	// bootMarker is printed first: userspace is running. It is the line the
	// vm driver's accelerator probe waits for, so the same initramfs serves
	// the probe.
	bootMarker = guestinit.StartedMarker
	// tickPrefix starts each counter line of the tick mode:
	// "space-baseline: tick N", N counting from 0 every 10 ms.
	tickPrefix = "space-baseline: tick "
)

// maxSerialLine bounds the bytes kept of one console line; the rest of a
// longer line is dropped (it cannot be a marker).
const maxSerialLine = 256

// maxTickDigits bounds a counter (a uint64 has at most 20 digits).
const maxTickDigits = 20

// mark is what one console line says.
type mark struct {
	// boot is set for the boot marker.
	boot bool
	// tick is the counter of a tick line (boot unset).
	tick uint64
}

// parseSerialLine reads one console line, without its newline: the boot
// marker anywhere in the line (kernel messages may share it), or a tick line
// whose counter is all that follows the prefix (a trailing carriage return
// and spaces aside). Anything else, a counter out of range included, is no
// mark.
func parseSerialLine(line []byte) (mark, bool) {
	if bytes.Contains(line, []byte(bootMarker)) {
		return mark{boot: true}, true
	}
	i := bytes.Index(line, []byte(tickPrefix))
	if i < 0 {
		return mark{}, false
	}
	digits := bytes.TrimRight(line[i+len(tickPrefix):], "\r ")
	if len(digits) == 0 || len(digits) > maxTickDigits {
		return mark{}, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return mark{}, false
		}
	}
	n, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return mark{}, false
	}
	return mark{tick: n}, true
}

// console reads a guest's serial console to its end and records when the
// marks first appeared. It always drains its input: a guest whose console
// is not read stalls.
type console struct {
	boot, tick chan struct{} // closed at the first boot marker, the first tick
	done       chan struct{} // closed at the end of the input

	mu        sync.Mutex // guards the fields below
	bootAt    time.Time
	tickAt    time.Time
	firstTick uint64
	lastTick  uint64
	tail      tailBuffer
}

func newConsole() *console {
	return &console{boot: make(chan struct{}), tick: make(chan struct{}), done: make(chan struct{})}
}

// run reads r until its end, splitting it into lines of at most
// maxSerialLine bytes kept.
func (c *console) run(r io.Reader) {
	defer close(c.done)
	buf := make([]byte, 32<<10)
	var line []byte
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		c.mu.Lock()
		c.tail.Write(chunk)
		c.mu.Unlock()
		for len(chunk) > 0 {
			nl := bytes.IndexByte(chunk, '\n')
			part := chunk
			if nl >= 0 {
				part = chunk[:nl]
			}
			if room := maxSerialLine - len(line); room > 0 {
				line = append(line, part[:min(room, len(part))]...)
			}
			if nl < 0 {
				break
			}
			c.line(line, time.Now())
			line = line[:0]
			chunk = chunk[nl+1:]
		}
		if err != nil {
			return
		}
	}
}

// line records one complete line read at t.
func (c *console) line(b []byte, t time.Time) {
	m, ok := parseSerialLine(b)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case m.boot:
		if c.bootAt.IsZero() {
			c.bootAt = t
			close(c.boot)
		}
	case c.tickAt.IsZero():
		c.tickAt, c.firstTick, c.lastTick = t, m.tick, m.tick
		close(c.tick)
	default:
		c.lastTick = m.tick
	}
}

// booted returns when the boot marker was read, zero if it was not.
func (c *console) booted() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bootAt
}

// ticks returns when the first tick was read, its counter and the latest
// counter read.
func (c *console) ticks() (at time.Time, first, last uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tickAt, c.firstTick, c.lastTick
}

// output returns the end of what the console printed, for error messages.
func (c *console) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return printable(c.tail.String())
}

// tailBuffer keeps the last tailBytes written to it.
type tailBuffer struct {
	b []byte
}

const tailBytes = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-tailBytes:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// printable returns s trimmed, with control characters (but newlines) and
// invalid UTF-8 replaced, for output from a guest or a tool in an error.
func printable(s string) string {
	var b bytes.Buffer
	for _, r := range string(bytes.TrimSpace([]byte(s))) {
		switch {
		case r == '\n':
			b.WriteString(" | ")
		case r == utf8.RuneError, r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
