package benchstat

import (
	"testing"
	"time"
)

const sampleStat = `cpu  4705 356 584 3699176 23060 0 277 5 7 9
cpu0 1393 280 345 1843216 15360 0 159 0 0 0
cpu1 3312 76 239 1855960 7700 0 118 5 7 9
intr 1462898 21 9 0 0
ctxt 3046436
btime 1700000000
`

func TestParseProcStatAggregateLine(t *testing.T) {
	got, err := ParseProcStat([]byte(sampleStat))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal; guest fields are already in user.
	want := CPUTimes{Busy: 4705 + 356 + 584 + 0 + 277 + 5, Idle: 3699176 + 23060}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseProcStatOldKernelSevenFields(t *testing.T) {
	got, err := ParseProcStat([]byte("cpu 10 20 30 40 50 60 70\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUTimes{Busy: 10 + 20 + 30 + 60 + 70, Idle: 90}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestParseProcStatBadTextIsAnError(t *testing.T) {
	for name, text := range map[string]string{
		"empty":         "",
		"no cpu line":   "cpu0 1 2 3 4 5 6 7 8\nintr 5\n",
		"short line":    "cpu 1 2 3\n",
		"not a number":  "cpu 1 2 x 4 5 6 7 8\n",
		"negative":      "cpu 1 2 -3 4 5 6 7 8\n",
		"garbage":       "\x00\x01 hello",
		"cpu without n": "cpu\n",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := ParseProcStat([]byte(text)); err == nil {
				t.Errorf("ParseProcStat(%q) = %+v, want an error", text, got)
			}
		})
	}
}

func TestBusySinceAndPerOp(t *testing.T) {
	start := CPUTimes{Busy: 1000, Idle: 5}
	end := CPUTimes{Busy: 1250, Idle: 9}
	busy := end.BusySince(start)
	if busy != 2500*time.Millisecond {
		t.Errorf("BusySince = %v, want 2.5s (250 ticks of 10 ms)", busy)
	}
	if got := PerOp(busy, 10); got != 250*time.Millisecond {
		t.Errorf("PerOp = %v, want 250ms", got)
	}
	if got := PerOp(busy, 0); got != 0 {
		t.Errorf("PerOp of no operations = %v, want 0", got)
	}
	if got := start.BusySince(end); got != 0 {
		t.Errorf("a counter going backwards = %v, want 0", got)
	}
}

func TestReadCPUTimesOnThisMachine(t *testing.T) {
	c, err := ReadCPUTimes()
	if err != nil {
		t.Skipf("no /proc/stat here: %v", err)
	}
	if c.Busy == 0 || c.Idle == 0 {
		t.Errorf("ReadCPUTimes = %+v, want a machine that has run and idled since boot", c)
	}
}
