package metrics

import (
	"strings"
	"sync"
	"testing"
)

func TestCounterVecWrite(t *testing.T) {
	c := NewCounterVec("space_requests_total", "Requests by route and code.", "route", "code")
	c.Inc("/b", "200")
	c.Inc("/a", "404")
	c.Inc("/b", "200")
	c.Inc(`a"b\c`+"\n", "500")
	var b strings.Builder
	c.Write(&b)
	want := `# HELP space_requests_total Requests by route and code.
# TYPE space_requests_total counter
space_requests_total{route="/a",code="404"} 1
space_requests_total{route="/b",code="200"} 2
space_requests_total{route="a\"b\\c\n",code="500"} 1
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if got := c.Value("/b", "200"); got != 2 {
		t.Errorf("Value = %d, want 2", got)
	}
}

func TestAlwaysWritesZeros(t *testing.T) {
	c := NewCounterVec("x_total", "X.", "reason").Always("b", "a")
	c.Inc("c")
	var b strings.Builder
	c.Write(&b)
	want := "# HELP x_total X.\n# TYPE x_total counter\nx_total{reason=\"a\"} 0\nx_total{reason=\"b\"} 0\nx_total{reason=\"c\"} 1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	WriteCounter(&b, "x_total", "X.", "reason", []string{"b", "a"}, map[string]uint64{"c": 1})
	if b.String() != want {
		t.Errorf("WriteCounter: got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestGauges(t *testing.T) {
	var b strings.Builder
	WriteGauge(&b, "g_seconds", "G\nwith a line feed.", 1.5)
	WriteGauge(&b, "g_agreed", "", 1)
	WriteGaugeVec(&b, "g_by_state", "By state.", "state", map[string]int{"running": 2, "paused": 1})
	want := `# HELP g_seconds G\nwith a line feed.
# TYPE g_seconds gauge
g_seconds 1.5
# TYPE g_agreed gauge
g_agreed 1
# HELP g_by_state By state.
# TYPE g_by_state gauge
g_by_state{state="paused"} 1
g_by_state{state="running"} 2
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestHistogram(t *testing.T) {
	h := NewHistogram("h_seconds", "", []float64{0.25, 1})
	var wg sync.WaitGroup
	for _, v := range []float64{0.125, 0.5, 4, 0.25} { // exact in binary: the sum does not depend on the order
		wg.Go(func() { h.Observe(v) })
	}
	wg.Wait()
	var b strings.Builder
	h.Write(&b)
	want := `# TYPE h_seconds histogram
h_seconds_bucket{le="0.25"} 2
h_seconds_bucket{le="1"} 3
h_seconds_bucket{le="+Inf"} 4
h_seconds_sum 4.875
h_seconds_count 4
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWrongLabelCountPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Inc with the wrong number of label values did not panic")
		}
	}()
	NewCounterVec("x_total", "X.", "a", "b").Inc("only one")
}
