package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may choose.
	line := "4242 (qemu (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 123456 1000000 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	ps, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatalf("parseProcStat: %v", err)
	}
	want := procStat{startTime: 123456, cpuNanos: 3e9, threads: 7, rssBytes: 2048 * uint64(os.Getpagesize())}
	if *ps != want {
		t.Errorf("got %+v, want %+v", *ps, want)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 a b"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) = nil error", bad)
		}
	}
	self, err := readProcStat(os.Getpid(), mustStartTime(t, os.Getpid()))
	if err != nil || self.threads == 0 || self.rssBytes == 0 {
		t.Errorf("readProcStat(self) = %+v, %v", self, err)
	}
	if _, err := readProcStat(os.Getpid(), 1); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("readProcStat with a wrong start time = %v, want NotFound", err)
	}
}

func mustStartTime(t *testing.T, pid int) uint64 {
	st, err := driver.ProcStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1 (a) S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 99 0 3"))
	f.Add([]byte("1 ()) ) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseProcStat(b)
	})
}

func TestCappedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	l, err := openCappedLog(path, 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A flood: 100 KiB in odd-sized writes.
	chunk := bytes.Repeat([]byte("x"), 333)
	for i := 0; i < 300; i++ {
		if _, err := l.Write(chunk); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	l.Write([]byte("THE END"))
	l.Close()
	cur, _ := os.ReadFile(path)
	old, _ := os.ReadFile(path + ".1")
	if len(cur) > 1000 || len(old) != 1000 {
		t.Errorf("sizes %d and %d; want at most 1000 and exactly 1000", len(cur), len(old))
	}
	if !bytes.HasSuffix(cur, []byte("THE END")) {
		t.Errorf("the latest output was not kept: %q", cur[max(0, len(cur)-20):])
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Errorf("%d files, want 2", len(entries))
	}
}

func TestParseQMP(t *testing.T) {
	m, err := parseQMPLine([]byte(`{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": ["oob"]}}`))
	if err != nil || m.QMP == nil {
		t.Errorf("greeting: %+v, %v", m, err)
	}
	m, err = parseQMPLine([]byte(`{"error": {"class": "GenericError", "desc": "nope"}}`))
	if err != nil || m.Error == nil || m.Error.Desc != "nope" {
		t.Errorf("error: %+v, %v", m, err)
	}
	c := &qmpConn{rw: nopRW{strings.NewReader(`{"event":"STOP"}` + "\n" + `{"return": {}}` + "\n")}}
	c.r = newReader(c.rw)
	if ret, err := c.execute("stop"); err != nil || string(ret) != "{}" {
		t.Errorf("execute skipping an event = %s, %v", ret, err)
	}
	long := `{"event":"` + strings.Repeat("a", maxQMPLine) + `"}` + "\n"
	c = &qmpConn{rw: nopRW{strings.NewReader(long)}}
	c.r = newReader(c.rw)
	if _, err := c.execute("stop"); err == nil {
		t.Error("an over-long message was accepted")
	}
}

// TestReadGreeting: events QEMU queued for the previous client come before
// the greeting and are skipped; anything else first is refused.
func TestReadGreeting(t *testing.T) {
	greeting := `{"QMP": {"version": {}, "capabilities": []}}` + "\n"
	for name, tc := range map[string]struct {
		in string
		ok bool
	}{
		"greeting":         {greeting, true},
		"events before":    {`{"event":"NETDEV_STREAM_DISCONNECTED","data":{"netdev-id":"net0"}}` + "\n" + `{"event":"STOP"}` + "\n" + greeting, true},
		"an answer before": {`{"return": {}}` + "\n" + greeting, false},
		"too many events":  {strings.Repeat(`{"event":"STOP"}`+"\n", maxEventsBeforeGreeting+2) + greeting, false},
		"nothing":          {"", false},
	} {
		c := &qmpConn{rw: nopRW{strings.NewReader(tc.in)}}
		c.r = newReader(c.rw)
		if err := c.readGreeting(); (err == nil) != tc.ok {
			t.Errorf("%s: readGreeting = %v, want ok %v", name, err, tc.ok)
		}
	}
}

func FuzzParseQMPLine(f *testing.F) {
	f.Add([]byte(`{"return": {}}`))
	f.Add([]byte(`{"error": null, "QMP": 1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseQMPLine(b)
	})
}

func TestQEMUArgs(t *testing.T) {
	st := &state{ExecID: "e1", MemoryMiB: 256, CPUs: 2, Accel: AccelTCG, Kernel: "/k", Initrd: "/i"}
	args := qemuArgs(st)
	joined := strings.Join(args, " ")
	for _, want := range []string{"-accel tcg", "-m 256", "-smp 2", "-nodefaults", "-no-reboot", "-kernel /k", "-initrd /i",
		"-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny", "name=space.0"} {
		if !strings.Contains(joined, want) {
			t.Errorf("QEMU args lack %q: %s", want, joined)
		}
	}
	if slices.Contains(args, "-netdev") || strings.Contains(joined, "-nic") || strings.Contains(joined, "serial file:") {
		t.Errorf("QEMU args give the VM a network or an uncapped console: %s", joined)
	}
	st.Accel = AccelKVM
	if joined := strings.Join(qemuArgs(st), " "); !strings.Contains(joined, "-accel kvm -cpu host") {
		t.Errorf("KVM args: %s", joined)
	}
}

func TestNewAndStartRejects(t *testing.T) {
	if _, err := New(Config{StateDir: "relative", Kernel: &vmimage.Kernel{Vmlinuz: "/k"}, QEMU: "/bin/true"}); err == nil {
		t.Error("New with a relative state dir = nil error")
	}
	if _, err := New(Config{StateDir: t.TempDir(), QEMU: "/bin/true"}); err == nil {
		t.Error("New without a kernel = nil error")
	}
	if _, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k"}, QEMU: "/bin/true", Accel: "hvf"}); err == nil {
		t.Error("New with an unknown accelerator = nil error")
	}
	d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k"}, QEMU: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	spec := driver.Spec{ExecID: "e1", SandboxID: "s1", RootFS: dir, GuestBinary: "/bin/true"}
	if _, err := d.Start(ctx, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Start with a directory as rootfs = %v, want InvalidArgument", err)
	}
	spec.ExecID = "../x"
	if _, err := d.Start(ctx, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Start with a bad exec id = %v, want InvalidArgument", err)
	}
	for _, op := range []func(context.Context, string) error{d.Kill, d.Pause, d.Resume} {
		if err := op(ctx, "unknown"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("operation on an unknown exec = %v, want NotFound", err)
		}
	}
	if err := d.Cleanup(ctx, "unknown"); err != nil {
		t.Errorf("Cleanup of an unknown exec = %v, want nil", err)
	}
	if alive, err := d.Alive(ctx, "unknown"); alive || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Alive(unknown) = %v, %v", alive, err)
	}
}

type nopRW struct{ r *strings.Reader }

func (n nopRW) Read(b []byte) (int, error)  { return n.r.Read(b) }
func (n nopRW) Write(b []byte) (int, error) { return len(b), nil }
func (n nopRW) Close() error                { return nil }

func TestPortEventsAndReopened(t *testing.T) {
	ev := func(id string, open bool) *qmpMessage {
		data, _ := json.Marshal(portEvent{ID: id, Open: open})
		return &qmpMessage{Event: "VSERPORT_CHANGE", Data: data}
	}
	events := []*qmpMessage{
		{Event: "STOP"},
		ev("other", true),
		ev(channelPortID, true),
		{Event: "VSERPORT_CHANGE", Data: json.RawMessage(`{"id": 5}`)},
		ev(channelPortID, false),
	}
	got := portEvents(events, channelPortID)
	if !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("portEvents = %v, want [true false]", got)
	}
	for _, c := range []struct {
		opens []bool
		skip  int
		want  bool
	}{
		{nil, 0, false},
		{[]bool{false}, 0, false},
		{[]bool{true}, 0, true},         // a close and reopen merged by QEMU's rate limit
		{[]bool{true}, 1, false},        // only the replayed state after a restore
		{[]bool{true, true}, 1, true},   // replay, then the merged close and reopen
		{[]bool{true, false}, 1, false}, // closed, not yet reopened
		{[]bool{true, false, true}, 1, true},
	} {
		if got := reopened(c.opens, c.skip); got != c.want {
			t.Errorf("reopened(%v, %d) = %v, want %v", c.opens, c.skip, got, c.want)
		}
	}
}

func TestQMPCallPassesArguments(t *testing.T) {
	var sent bytes.Buffer
	c := &qmpConn{rw: recordRW{r: strings.NewReader(`{"event":"VSERPORT_CHANGE","data":{"id":"chport0","open":false}}` + "\n" + `{"return": {}}` + "\n"), w: &sent}}
	c.r = newReader(c.rw)
	var seen []*qmpMessage
	c.onEvent = func(m *qmpMessage) { seen = append(seen, m) }
	if _, err := c.call("migrate", map[string]string{"uri": "fd:checkpoint"}, nil); err != nil {
		t.Fatalf("call: %v", err)
	}
	if want := `{"arguments":{"uri":"fd:checkpoint"},"execute":"migrate"}` + "\n"; sent.String() != want {
		t.Errorf("sent %q, want %q", sent.String(), want)
	}
	if len(seen) != 1 || !slices.Equal(portEvents(seen, channelPortID), []bool{false}) {
		t.Errorf("events handed on: %v", seen)
	}
	if _, err := c.call("getfd", nil, []int{0}); err == nil {
		t.Error("passing a descriptor over a non-socket succeeded")
	}
}

type recordRW struct {
	r io.Reader
	w io.Writer
}

func (n recordRW) Read(b []byte) (int, error)  { return n.r.Read(b) }
func (n recordRW) Write(b []byte) (int, error) { return n.w.Write(b) }
func (n recordRW) Close() error                { return nil }

func TestRestoreRefusesBadCheckpoints(t *testing.T) {
	d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k"}, QEMU: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := driver.Spec{ExecID: "r1", SandboxID: "r1"}
	if _, err := d.Restore(ctx, spec, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Restore(nil) = %v, want InvalidArgument", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, cpMeta), []byte(`{"accel":"tcg","kernel":"/nonexistent/k","initrd":"/nonexistent/i"}`), 0o600)
	f, err := driver.DescribeFile(dir, cpMeta)
	if err != nil {
		t.Fatal(err)
	}
	cp := &driver.Checkpoint{Dir: dir, Runtime: "ns", MemoryMiB: 256, CPUs: 1, Files: []driver.CheckpointFile{f}}
	if _, err := d.Restore(ctx, spec, cp); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Restore of an ns checkpoint = %v, want InvalidArgument", err)
	}
	cp.Runtime = "vm"
	spec.MemoryMiB = 512
	if _, err := d.Restore(ctx, spec, cp); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Restore with another memory size = %v, want InvalidArgument", err)
	}
	spec.MemoryMiB = 0
	if _, err := d.Restore(ctx, spec, cp); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/nonexistent/k") {
		t.Errorf("Restore with a missing kernel = %v, want FailedPrecondition naming it", err)
	}
	if _, err := os.Stat(filepath.Join(d.execDir("r1"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused restore left state: %v", err)
	}
}
