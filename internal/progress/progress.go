// Package progress measures long operations — a template build, a snapshot's
// upload or download — and shows them. A Tracker counts bytes through a
// reader or writer, or lines, and turns them into Reports, at most one per
// interval or step of the total and always the last; a Renderer draws
// Reports for a person: one bar redrawn in place on a terminal, plain lines
// elsewhere (a log, a pipe, CI).
//
// A Report has the same fields, in the same order, as the wire types
// nodev1.Progress and sandboxv1.Progress, so each converts to the others
// with a type conversion.
package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Unit names what Done and Total count.
const (
	// UnitBytes counts bytes; the rate is bytes per second.
	UnitBytes = "bytes"
	// UnitSteps counts steps (files, packages, lines of a build's output).
	UnitSteps = "steps"
)

// Report is one reading of a long operation.
type Report struct {
	// Phase names the operation or its step: "build", "upload", "download".
	Phase string `json:"phase"`
	// Message is the latest human-readable line (a build's output, the
	// artifact being sent); "" for none.
	Message string `json:"message,omitempty"`
	// Done and Total count Unit; Total is 0 when it is not known.
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
	// Rate is Done per second since the operation started.
	Rate float64 `json:"rate,omitempty"`
	// Final marks the last report of the phase.
	Final bool `json:"final,omitempty"`
}

// Percent is how much of Total is done (0–100), or -1 when Total is unknown.
func (r Report) Percent() float64 {
	if r.Total <= 0 {
		return -1
	}
	p := 100 * float64(r.Done) / float64(r.Total)
	return min(max(p, 0), 100)
}

// String is the report as one plain line: "upload: 12.0 MiB of 40.0 MiB
// (30%), 3.1 MiB/s: disk.img".
func (r Report) String() string {
	s := r.Phase
	if amount := r.amount(); amount != "" {
		s += ": " + amount
	}
	if r.Message != "" {
		s += ": " + r.Message
	}
	return s
}

// amount is "12.0 MiB of 40.0 MiB (30%), 3.1 MiB/s", "" when nothing is counted.
func (r Report) amount() string {
	if r.Total == 0 && (r.Done == 0 || r.Unit == UnitSteps) {
		return "" // a count of steps without a total tells a person nothing
	}
	s := r.count(r.Done)
	if r.Total > 0 {
		s += fmt.Sprintf(" of %s (%.0f%%)", r.count(r.Total), r.Percent())
	}
	if r.Rate > 0 && r.Unit == UnitBytes {
		s += ", " + Bytes(int64(r.Rate)) + "/s"
	}
	return s
}

func (r Report) count(n int64) string {
	if r.Unit == UnitBytes {
		return Bytes(n)
	}
	return fmt.Sprint(n)
}

// Bytes formats n in binary units: "512 B", "1.5 KiB", "40.0 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Reader wraps r so that the bytes read through it count as done on t.
func (t *Tracker) Reader(r io.Reader) io.Reader { return countingReader{r, t} }

// Writer wraps w so that the bytes written through it count as done on t.
func (t *Tracker) Writer(w io.Writer) io.Writer { return countingWriter{w, t} }

type countingReader struct {
	r io.Reader
	t *Tracker
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.t.Add(int64(n))
	}
	return n, err
}

type countingWriter struct {
	w io.Writer
	t *Tracker
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if n > 0 {
		w.t.Add(int64(n))
	}
	return n, err
}

// Throttle limits how often a Tracker reports: once Every has passed since
// the last report, or once the done fraction has grown by Step.
type Throttle struct {
	// Every is the least time between two reports; 0 means no time limit.
	Every time.Duration
	// Step is the least growth of Done/Total (0.1 = 10%) that is due at
	// once; 0 means none (time alone decides).
	Step float64
}

// Limiter passes the readings of a stream of Reports that are due under
// its Throttle: the first, each Final one, and those an interval or a step
// after the last one passed. The zero Limiter (with a Throttle set) is
// ready; it is not safe for concurrent use.
type Limiter struct {
	Throttle Throttle
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	passed   bool
	last     time.Time
	lastFrac float64
}

// Allow reports whether r is due, and if so counts it as passed.
func (l *Limiter) Allow(r Report) bool {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	t := now()
	frac := 0.0
	if r.Total > 0 {
		frac = float64(r.Done) / float64(r.Total)
	}
	due := !l.passed || r.Final ||
		(l.Throttle.Step > 0 && r.Total > 0 && frac-l.lastFrac >= l.Throttle.Step) ||
		t.Sub(l.last) >= l.Throttle.Every
	if due {
		l.passed, l.last, l.lastFrac = true, t, frac
	}
	return due
}

// Tracker follows one phase of an operation and calls its report function
// when a reading is due (see Limiter) and at Finish. It is safe for
// concurrent use; report is called with no lock held, never concurrently
// with itself.
type Tracker struct {
	report func(Report)
	now    func() time.Time

	sending sync.Mutex // serialises report calls, in order
	// mu guards the fields below.
	mu       sync.Mutex
	cur      Report
	start    time.Time
	limit    Limiter
	finished bool
}

// NewTracker starts tracking phase, of total units (0 when unknown). now is
// the clock (time.Now when nil); report receives the due readings.
func NewTracker(phase, unit string, total int64, th Throttle, now func() time.Time, report func(Report)) *Tracker {
	if now == nil {
		now = time.Now
	}
	t := &Tracker{report: report, now: now, limit: Limiter{Throttle: th, Now: now}}
	t.cur = Report{Phase: phase, Unit: unit, Total: total}
	t.start = now()
	return t
}

// Set records that done units are finished, with msg as the latest line
// when it is not "".
func (t *Tracker) Set(done int64, msg string) {
	t.update(func(r *Report) {
		r.Done = done
		if msg != "" {
			r.Message = msg
		}
	})
}

// Add records n more units finished.
func (t *Tracker) Add(n int64) { t.update(func(r *Report) { r.Done += n }) }

// Line records msg as the latest line and counts one step.
func (t *Tracker) Line(msg string) {
	t.update(func(r *Report) {
		r.Done++
		r.Message = msg
	})
}

// Tick reports when a report is due by time alone (Set and Add report only
// when called): an owner with a Counter calls it from a ticker after Set.
func (t *Tracker) Tick() { t.update(func(*Report) {}) }

// Finish sends the last report of the phase, with Final set, whatever the
// throttle says; later calls do nothing.
func (t *Tracker) Finish() {
	t.sending.Lock()
	defer t.sending.Unlock()
	t.mu.Lock()
	if t.finished {
		t.mu.Unlock()
		return
	}
	t.finished = true
	t.cur.Final = true
	r := t.reading(t.now())
	t.mu.Unlock()
	t.report(r)
}

// Current is the latest reading, whether or not it was reported.
func (t *Tracker) Current() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reading(t.now())
}

func (t *Tracker) update(f func(*Report)) {
	t.sending.Lock()
	defer t.sending.Unlock()
	t.mu.Lock()
	if t.finished {
		t.mu.Unlock()
		return
	}
	f(&t.cur)
	r := t.reading(t.now())
	if !t.limit.Allow(r) {
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.report(r)
}

// SetTotal changes the total: an operation that learns it late, or finds
// more than it was told.
func (t *Tracker) SetTotal(total int64) {
	t.mu.Lock()
	t.cur.Total = total
	t.mu.Unlock()
}

// reading is the current report with its rate at now.
func (t *Tracker) reading(now time.Time) Report {
	r := t.cur
	if el := now.Sub(t.start).Seconds(); el > 0 {
		r.Rate = float64(r.Done) / el
	}
	return r
}
