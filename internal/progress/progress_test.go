package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func TestTrackerCountsReadsAndWrites(t *testing.T) {
	var last Report
	tr := NewTracker("upload", UnitBytes, 24, Throttle{}, newClock().now, func(r Report) { last = r })
	var out bytes.Buffer
	n, err := io.Copy(tr.Writer(&out), tr.Reader(strings.NewReader("hello, world")))
	if err != nil || n != 12 || out.String() != "hello, world" {
		t.Fatalf("copy = %d, %v, %q; want 12 bytes through", n, err, out.String())
	}
	tr.Finish()
	// Read and written: both count.
	if last.Done != 24 || !last.Final {
		t.Errorf("last report = %+v, want final with 24 done (12 read + 12 written)", last)
	}
}

func TestTrackerThrottlesByTime(t *testing.T) {
	clk := newClock()
	var got []Report
	tr := NewTracker("upload", UnitBytes, 0, Throttle{Every: 2 * time.Second}, clk.now, func(r Report) { got = append(got, r) })
	tr.Set(10, "") // first reading: reported at once
	for i := 0; i < 10; i++ {
		clk.advance(100 * time.Millisecond)
		tr.Add(10) // within 2 s of the first: held back
	}
	if len(got) != 1 {
		t.Fatalf("reports after 1 s = %d, want 1 (the first)", len(got))
	}
	clk.advance(time.Second)
	tr.Add(10) // 2 s after the first: due
	clk.advance(time.Second)
	tr.Add(5)
	tr.Finish()
	tr.Finish() // once only
	tr.Add(1)   // after Finish: ignored
	if len(got) != 3 {
		t.Fatalf("reports = %d (%+v), want 3: first, after 2 s, final", len(got), got)
	}
	if got[1].Done != 120 || got[1].Final {
		t.Errorf("second report = %+v, want done 120, not final", got[1])
	}
	last := got[2]
	if !last.Final || last.Done != 125 {
		t.Errorf("final report = %+v, want final with done 125", last)
	}
	if want := 125.0 / 3; last.Rate < want-0.01 || last.Rate > want+0.01 {
		t.Errorf("rate = %.2f, want %.2f (125 bytes in 3 s)", last.Rate, want)
	}
}

func TestTrackerThrottlesByStep(t *testing.T) {
	clk := newClock()
	var got []int64
	tr := NewTracker("download", UnitBytes, 1000, Throttle{Every: time.Hour, Step: 0.25}, clk.now, func(r Report) { got = append(got, r.Done) })
	for done := int64(0); done <= 1000; done += 50 {
		tr.Set(done, "")
	}
	tr.Finish()
	// First (0), then every 25%, then the final reading again.
	want := []int64{0, 250, 500, 750, 1000, 1000}
	if len(got) != len(want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reported %v, want %v", got, want)
		}
	}
}

func TestTrackerLinesAndTick(t *testing.T) {
	clk := newClock()
	var got []Report
	tr := NewTracker("build", UnitSteps, 0, Throttle{Every: time.Second}, clk.now, func(r Report) { got = append(got, r) })
	tr.Line("I: Retrieving Release")
	tr.Line("I: Validating libc6")
	clk.advance(time.Second)
	tr.Tick()
	if len(got) != 2 || got[1].Message != "I: Validating libc6" || got[1].Done != 2 {
		t.Fatalf("reports = %+v, want the first line, then the latest after the tick", got)
	}
	if c := tr.Current(); c.Done != 2 {
		t.Errorf("Current().Done = %d, want 2", c.Done)
	}
}

func TestReportString(t *testing.T) {
	for _, tc := range []struct {
		r    Report
		want string
	}{
		{Report{Phase: "build", Message: "copying"}, "build: copying"},
		{Report{Phase: "build", Unit: UnitSteps, Done: 3, Message: "x"}, "build: x"},
		{Report{Phase: "build", Unit: UnitSteps, Done: 3, Total: 4, Message: "x"}, "build: 3 of 4 (75%): x"},
		{Report{Phase: "upload", Unit: UnitBytes, Done: 1 << 20, Total: 4 << 20, Rate: 512 << 10},
			"upload: 1.0 MiB of 4.0 MiB (25%), 512.0 KiB/s"},
		{Report{Phase: "download", Unit: UnitBytes, Done: 100, Total: 100, Message: "disk"}, "download: 100 B of 100 B (100%): disk"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestPlainRenderer(t *testing.T) {
	var out bytes.Buffer
	d := NewPlainRenderer(&out)
	r := Report{Phase: "upload", Unit: UnitBytes, Done: 1 << 20, Total: 2 << 20}
	d.Show(r)
	d.Show(r) // the same line again: not repeated
	r.Done = 2 << 20
	d.Show(r)
	d.Show(Report{Phase: "build", Message: "evil \x1b[2J\rline"})
	d.Done()
	want := "upload: 1.0 MiB of 2.0 MiB (50%)\nupload: 2.0 MiB of 2.0 MiB (100%)\nbuild: evil ?[2J?line\n"
	if out.String() != want {
		t.Errorf("plain output = %q, want %q", out.String(), want)
	}
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Errorf("plain output %q holds a carriage return or an escape", out.String())
	}
}

func TestBarRenderer(t *testing.T) {
	var out bytes.Buffer
	d := NewBarRenderer(&out, 80)
	d.Show(Report{Phase: "upload", Unit: UnitBytes, Done: 0, Total: 1000, Message: "a-much-longer-message"})
	d.Show(Report{Phase: "upload", Unit: UnitBytes, Done: 500, Total: 1000})
	d.Println("note")
	d.Show(Report{Phase: "upload", Unit: UnitBytes, Done: 1000, Total: 1000})
	d.Done()
	frames := strings.Split(out.String(), "\r")
	if len(frames) != 4 || frames[0] != "" {
		t.Fatalf("bar output %q: want three frames, each after a carriage return", out.String())
	}
	if want := "upload [........................]   0% 0 B of 1000 B: a-much-longer-message"; frames[1] != want {
		t.Errorf("first frame = %q, want %q", frames[1], want)
	}
	// The shorter second frame blanks what is left of the first.
	second := "upload [############............]  50% 500 B of 1000 B"
	if !strings.HasPrefix(frames[2], second) || len(frames[2]) != len(frames[1])+len("\nnote\n") {
		t.Errorf("second frame = %q, want %q padded to the first's width, then the note", frames[2], second)
	}
	if !strings.HasSuffix(frames[2], "\nnote\n") {
		t.Errorf("second frame = %q: want the note on a line of its own", frames[2])
	}
	if want := "upload [########################] 100% 1000 B of 1000 B\n"; frames[3] != want {
		t.Errorf("last frame = %q, want %q", frames[3], want)
	}
	for _, f := range frames {
		if strings.ContainsRune(strings.TrimSuffix(f, "\n"), '\x1b') {
			t.Errorf("frame %q holds an escape sequence", f)
		}
	}
}

func TestBarRendererCutsToWidth(t *testing.T) {
	var out bytes.Buffer
	d := NewBarRenderer(&out, 30)
	d.Show(Report{Phase: "build", Message: "\x1b]0;title\a" + strings.Repeat("x", 100)})
	if got := strings.TrimPrefix(out.String(), "\r"); len(got) != 29 || strings.ContainsAny(got, "\x1b\a") {
		t.Errorf("bar = %q (%d), want 29 printable columns", got, len(got))
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 40 << 20: "40.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLimiter(t *testing.T) {
	clk := newClock()
	l := Limiter{Throttle: Throttle{Every: 2 * time.Second}, Now: clk.now}
	steps := []struct {
		after time.Duration
		r     Report
		want  bool
	}{
		{0, Report{Done: 1}, true}, // the first
		{time.Second, Report{Done: 2}, false},
		{time.Second, Report{Done: 3}, true}, // 2 s after the first
		{0, Report{Done: 3, Final: true}, true},
	}
	for i, s := range steps {
		clk.advance(s.after)
		if got := l.Allow(s.r); got != s.want {
			t.Errorf("step %d: Allow(%+v) = %v, want %v", i, s.r, got, s.want)
		}
	}
}
