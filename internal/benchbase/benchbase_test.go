package benchbase

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/benchstat"
	"github.com/spacesandbox/space/internal/driver/vm"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/testenv"
)

// cpioEntry is one decoded newc entry.
type cpioEntry struct {
	mode      uint32
	rdevMajor uint32
	rdevMinor uint32
	data      []byte
}

// readNewc decodes a newc archive up to its trailer.
func readNewc(t *testing.T, b []byte) map[string]cpioEntry {
	t.Helper()
	out := map[string]cpioEntry{}
	off := 0
	field := func(hdr []byte, i int) uint32 {
		v, err := strconv.ParseUint(string(hdr[6+8*i:6+8*i+8]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d %q: %v", i, hdr[6+8*i:6+8*i+8], err)
		}
		return uint32(v)
	}
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		hdr := b[off : off+110]
		if string(hdr[:6]) != "070701" {
			t.Fatalf("entry at %d: magic %q, want 070701", off, hdr[:6])
		}
		mode, size, nameSize := field(hdr, 1), field(hdr, 6), field(hdr, 11)
		major, minor := field(hdr, 9), field(hdr, 10)
		nameEnd := off + 110 + int(nameSize)
		name := string(bytes.TrimSuffix(b[off+110:nameEnd], []byte{0}))
		dataOff := nameEnd + (4-(nameEnd)%4)%4
		if name == "TRAILER!!!" {
			return out
		}
		data := b[dataOff : dataOff+int(size)]
		out[name] = cpioEntry{mode: mode, rdevMajor: major, rdevMinor: minor, data: data}
		off = dataOff + int(size) + (4-int(size)%4)%4
	}
}

func TestInitramfs(t *testing.T) {
	busybox := filepath.Join(t.TempDir(), "busybox")
	content := []byte("\x7fELF not really busybox, 37 bytes...")
	if err := os.WriteFile(busybox, content, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, busybox); err != nil {
		t.Fatal(err)
	}
	entries := readNewc(t, buf.Bytes())
	init, ok := entries["init"]
	if !ok {
		t.Fatalf("no init in the archive: %v", slices.Collect(mapsKeys(entries)))
	}
	if init.mode != 0o100755 {
		t.Errorf("init mode %o, want 100755", init.mode)
	}
	script := string(init.data)
	for _, want := range []string{"#!/bin/busybox sh\n", `echo "` + bootMarker + `"`, tickPrefix + "$i", `"$1" = "tick"`, "usleep 10000", "reboot -f"} {
		if !strings.Contains(script, want) {
			t.Errorf("init lacks %q:\n%s", want, script)
		}
	}
	if bb := entries["bin/busybox"]; !bytes.Equal(bb.data, content) || bb.mode != 0o100755 {
		t.Errorf("bin/busybox = mode %o, %q; want 100755 and the host file", bb.mode, bb.data)
	}
	if c := entries["dev/console"]; c.mode != 0o020600 || c.rdevMajor != 5 || c.rdevMinor != 1 {
		t.Errorf("dev/console = %+v, want a 5:1 character device", c)
	}
	for _, d := range []string{"bin", "dev"} {
		if entries[d].mode != 0o040755 {
			t.Errorf("%s mode %o, want directory 755", d, entries[d].mode)
		}
	}
}

func mapsKeys(m map[string]cpioEntry) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestInitramfsByTool checks the archive with the cpio tool, as a second
// reader: the kernel's format, not just ours.
func TestInitramfsByTool(t *testing.T) {
	cpio := testenv.RequiresTool(t, "cpio")
	dir := t.TempDir()
	busybox := filepath.Join(dir, "bb")
	if err := os.WriteFile(busybox, []byte("bb"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "initramfs.cpio")
	if err := buildInitramfs(archive, busybox); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := groupCommand(context.Background(), []string{cpio, "-i", "--quiet", "--no-absolute-filenames", "-F", archive, "init"})
	cmd.Dir = out
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v: %s", err, b)
	}
	got, err := os.ReadFile(filepath.Join(out, "init"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != initScript {
		t.Errorf("extracted init = %q, want the script", got)
	}
}

func TestGuestArgs(t *testing.T) {
	g := &guest{qemu: "/usr/bin/qemu-system-x86_64", kernel: "/k/bzImage", initrd: "/t/initramfs.cpio", machine: vm.MachineMicrovm, accel: vm.AccelTCG}
	machine, cmdline := vm.MachineArgs(vm.MachineMicrovm, vm.AccelTCG)
	boot := g.args(modeBoot, "", false)
	if boot[0] != g.qemu || !slices.Equal(boot[1:1+len(machine)], machine) {
		t.Errorf("boot args start %q, want QEMU then %q", boot, machine)
	}
	if machine[0] != "-M" || !strings.HasPrefix(machine[1], "microvm,") || !slices.ContainsFunc(machine, func(a string) bool { return a == "tcg" || strings.HasPrefix(a, "tcg,") }) {
		t.Errorf("MachineArgs(microvm, tcg) = %q", machine)
	}
	joined := strings.Join(boot, " ")
	for _, want := range []string{"-kernel /k/bzImage", "-initrd /t/initramfs.cpio", "-no-reboot", "-nodefaults", "-serial stdio", "-m 256", "-smp 1"} {
		if !strings.Contains(joined, want) {
			t.Errorf("boot args lack %q: %s", want, joined)
		}
	}
	if i := slices.Index(boot, "-append"); i < 0 || boot[i+1] != cmdline+" -- boot" {
		t.Errorf("boot -append = %q, want %q", boot[i+1:i+2], cmdline+" -- boot")
	}
	if slices.Contains(boot, "-qmp") || slices.Contains(boot, "-incoming") {
		t.Errorf("a plain boot has QMP or incoming: %s", joined)
	}
	restore := strings.Join(g.args(modeTick, "/t/q.sock", true), " ")
	for _, want := range []string{"-qmp unix:/t/q.sock,server=on,wait=off", "-S -incoming fd:3", " -- tick"} {
		if !strings.Contains(restore, want) {
			t.Errorf("restore args lack %q: %s", want, restore)
		}
	}
	kvm, _ := vm.MachineArgs(vm.MachineQ35, vm.AccelKVM)
	if !slices.Equal(kvm, []string{"-M", "q35", "-accel", "kvm", "-cpu", "host"}) {
		t.Errorf("MachineArgs(q35, kvm) = %q", kvm)
	}
}

func TestSpawnArgs(t *testing.T) {
	got := spawnArgs("/usr/bin/unshare", "/usr/sbin/chroot", "/tmp/r")
	want := []string{"/usr/bin/unshare", "--fork", "--pid", "--mount", "--uts", "--ipc", "--net", "/usr/sbin/chroot", "/tmp/r", "/bin/true"}
	if !slices.Equal(got, want) {
		t.Errorf("spawnArgs = %q, want %q", got, want)
	}
}

func TestMakeRoot(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bb")
	if err := os.WriteFile(src, []byte("busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := makeRoot(root, src); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(root, "bin", "true")); err != nil || target != "busybox" {
		t.Errorf("bin/true -> %q (%v), want busybox", target, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "bin", "busybox")); err != nil || string(b) != "busybox" {
		t.Errorf("bin/busybox = %q (%v)", b, err)
	}
}

func TestCheckStaticELF(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkStaticELF(notELF); err == nil {
		t.Errorf("checkStaticELF(a script) = nil, want an error")
	}
	// Debian's /bin/sh (dash) is dynamically linked.
	if err := checkStaticELF("/bin/sh"); err == nil || !strings.Contains(err.Error(), "busybox-static") {
		t.Errorf("checkStaticELF(/bin/sh) = %v, want dynamically linked", err)
	}
}

func TestParseSerialLine(t *testing.T) {
	tests := []struct {
		line string
		want mark
		ok   bool
	}{
		{bootMarker, mark{boot: true}, true},
		{"[    1.0] x " + bootMarker + "\r", mark{boot: true}, true},
		{tickPrefix + "0", mark{tick: 0}, true},
		{tickPrefix + "42\r", mark{tick: 42}, true},
		{"garbage" + tickPrefix + "7 \r", mark{tick: 7}, true},
		{tickPrefix + "18446744073709551615", mark{tick: 1<<64 - 1}, true},
		{tickPrefix + "18446744073709551616", mark{}, false},
		{tickPrefix + "123456789012345678901", mark{}, false},
		{tickPrefix, mark{}, false},
		{tickPrefix + "-1", mark{}, false},
		{tickPrefix + "1x", mark{}, false},
		{tickPrefix + "1 2", mark{}, false},
		{"space-baseline: tock 1", mark{}, false},
		{"", mark{}, false},
	}
	for _, tt := range tests {
		got, ok := parseSerialLine([]byte(tt.line))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSerialLine(%q) = %+v, %v; want %+v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzParseSerialLine(f *testing.F) {
	f.Add([]byte(bootMarker), uint64(0))
	f.Add([]byte(tickPrefix+"12\r"), uint64(12))
	f.Add([]byte(tickPrefix+"99999999999999999999"), uint64(1<<64-1))
	f.Add([]byte("\x00\xff"+tickPrefix), uint64(7))
	f.Fuzz(func(t *testing.T, line []byte, n uint64) {
		m, ok := parseSerialLine(line)
		switch {
		case !ok && m != (mark{}):
			t.Fatalf("parseSerialLine(%q) = %+v without a mark", line, m)
		case ok && m.boot && !bytes.Contains(line, []byte(bootMarker)):
			t.Fatalf("boot mark from %q", line)
		case ok && !m.boot && !bytes.Contains(line, []byte(tickPrefix)):
			t.Fatalf("tick %d from %q", m.tick, line)
		}
		// What the guest prints reads back as printed, whatever came first
		// on the line (but a boot marker, which wins).
		printed := append(bytes.Clone(line), tickPrefix+strconv.FormatUint(n, 10)+"\r"...)
		if bytes.Contains(printed, []byte(bootMarker)) {
			return
		}
		if i := bytes.Index(printed, []byte(tickPrefix)); i < len(line) {
			return // an earlier prefix in line decides
		}
		if m, ok := parseSerialLine(printed); !ok || m.boot || m.tick != n {
			t.Fatalf("parseSerialLine(%q) = %+v, %v; want tick %d", printed, m, ok, n)
		}
	})
}

// chunkReader returns its data in pieces of n bytes, as a pipe might.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(r.n, len(p), len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

func TestConsole(t *testing.T) {
	long := strings.Repeat("x", 3*maxSerialLine) + tickPrefix + "5\n" // cut: no mark
	stream := "SeaBIOS\r\n" + long + "noise " + bootMarker + "\r\n" + tickPrefix + "3\r\n" + tickPrefix + "4\r\n" + tickPrefix + "9"
	for _, n := range []int{1, 3, 7, 1 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := newConsole()
			c.run(&chunkReader{data: []byte(stream), n: n})
			select {
			case <-c.boot:
			default:
				t.Fatal("boot marker not seen")
			}
			select {
			case <-c.tick:
			default:
				t.Fatal("no tick seen")
			}
			at, first, last := c.ticks()
			if at.Before(c.booted()) || first != 3 || last != 4 {
				t.Errorf("ticks = %v, %d, %d; want after the boot, first 3, last 4 (9 has no newline)", at, first, last)
			}
			if out := c.output(); !strings.HasSuffix(out, tickPrefix+"9") || len(out) > 2*tailBytes {
				t.Errorf("output ends %q", out[max(0, len(out)-40):])
			}
		})
	}
}

func FuzzConsole(f *testing.F) {
	f.Add([]byte(bootMarker+"\n"+tickPrefix+"1\n"), 3)
	f.Add([]byte(strings.Repeat("\n", 10)+"\x00"), 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 1 || n > 1<<16 {
			n = 1
		}
		c := newConsole()
		c.run(&chunkReader{data: b, n: n})
		<-c.done
		_, first, last := c.ticks()
		if first > 0 || last > 0 {
			select {
			case <-c.tick:
			default:
				t.Fatalf("counters %d, %d without the tick channel closed", first, last)
			}
		}
		if len(c.output()) > 4*tailBytes {
			t.Fatalf("output kept %d bytes", len(c.output()))
		}
	})
}

func TestPrintable(t *testing.T) {
	if got := printable(" a\x1b[2Jb\nc\xff "); got != "a?[2Jb | c?" {
		t.Errorf("printable = %q", got)
	}
}

func TestRunRejectsZeroCount(t *testing.T) {
	var r benchstat.Report
	if err := Run(context.Background(), Config{Count: 0}, &r); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Run(count 0) = %v, want invalid argument", err)
	}
}

func TestCheckNamesMissingBusybox(t *testing.T) {
	_, err := Check(filepath.Join(t.TempDir(), "no-busybox"))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "busybox-static") {
		t.Errorf("Check(missing busybox) = %v, want a failed precondition naming busybox-static", err)
	}
}

// TestRunForReal runs every baseline once on this machine: root, unshare,
// chroot, busybox-static, QEMU and the guest kernel (`make kernel`, or
// Debian's cloud kernel fetched with apt). About 5-20 s under TCG.
func TestRunForReal(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresTool(t, "qemu-system-x86_64", "unshare", "chroot")
	if _, err := os.Stat(DefaultBusybox); err != nil {
		t.Skipf("skipping: needs %s (apt-get install busybox-static): %v", DefaultBusybox, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var r benchstat.Report
	tmp := t.TempDir()
	t0 := time.Now()
	if err := Run(ctx, Config{Count: 1, TempDir: tmp}, &r); err != nil {
		t.Fatal(err)
	}
	t.Logf("baselines took %s", time.Since(t0).Round(time.Millisecond))
	var names []string
	for _, s := range r.Scenarios {
		names = append(names, s.Name)
		if s.Summary.N != 1 || s.Summary.P50 <= 0 || s.Summary.Max != s.Summary.P50 {
			t.Errorf("%s = %+v, want one positive sample", s.Name, s.Summary)
		}
		if r.Notes[s.Name] == "" {
			t.Errorf("%s has no note", s.Name)
		}
		t.Logf("%s: %s (%s)", s.Name, s.Summary.P50, r.Notes[s.Name])
	}
	if want := []string{RowSpawn, RowBoot, RowRestore}; !slices.Equal(names, want) {
		t.Errorf("rows %q, want %q", names, want)
	}
	if b, err := json.Marshal(r); err != nil || !bytes.Contains(b, []byte(`"`+RowRestore+`":{"p50_ms"`)) {
		t.Errorf("JSON %s (%v) lacks the restore row", b, err)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("left behind in %s: %v (%v)", tmp, left, err)
	}
}
