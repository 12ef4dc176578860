package vm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/vmimage"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// btrfsDir mounts a scratch btrfs (a loopback image) for the test and
// returns its mount point; it is unmounted at the end.
func btrfsDir(t *testing.T, size int64) string {
	t.Helper()
	testenv.RequiresBtrfs(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := btrfs.MountLoopback(ctx, filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt"), size)
	if err != nil {
		t.Fatalf("mount a scratch btrfs: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("unmount the scratch btrfs: %v", err)
		}
	})
	return l.Mountpoint
}

// token returns a random string to find in guest memory.
func token(t *testing.T) string {
	b := make([]byte, 24)
	rand.Read(b)
	return "space-memfile-" + hex.EncodeToString(b)
}

// ramHolds reports whether the RAM file of execution id holds s.
func ramHolds(t *testing.T, stateDir, id, s string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "exec", id, memFile))
	if err != nil {
		t.Fatalf("read the RAM file of %s: %v", id, err)
	}
	return bytes.Contains(b, []byte(s))
}

// TestMemoryFile runs VMs whose RAM is a file on btrfs: two VMs from one
// template snapshot each have their own RAM file and see nothing of the
// other's writes; a full snapshot reflinks the RAM file and its stream holds
// only the device state; a restore keeps the guest's memory (a tmpfs file,
// a running process); a checkpoint whose RAM file is missing or of the
// wrong size is refused; a checkpoint of the stream kind (a driver with RAM
// files off, as before them) still restores; Cleanup leaves no RAM file.
func TestMemoryFile(t *testing.T) {
	f := newFixture(t)
	root := btrfsDir(t, 6<<30)
	stateDir, cacheDir := filepath.Join(root, "state"), filepath.Join(root, "cache")
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = copyFile(filepath.Join(f.cacheDir, "accel.json"), filepath.Join(cacheDir, "accel.json"))
	d, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: cacheDir, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"mf-a", "mf-b", "mf-r1", "mf-r2", "mf-bad", "mf-s", "mf-sr"}
	t.Cleanup(func() {
		for _, id := range ids {
			d.Cleanup(context.Background(), id)
		}
		d.Wait()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spec := func(id string) driver.Spec {
		return driver.Spec{ExecID: id, SandboxID: id, RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 1}
	}
	start := func(d *Driver, id string) (*driver.Instance, *guest.Client) {
		t.Helper()
		inst, err := d.Start(ctx, spec(id))
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		c, _ := connectGuest(t, ctx, inst, time.Now())
		initGuest(t, ctx, c, id, nil)
		return inst, c
	}

	instA, a := start(d, "mf-a")
	instB, b := start(d, "mf-b")
	if got := d.Counters(); got.TemplateBuilds != 1 || got.TemplateRestores != 2 {
		t.Fatalf("Counters = %+v; want both VMs restored from one template snapshot", got)
	}
	var inodes []uint64
	for _, id := range []string{"mf-a", "mf-b"} {
		st, err := d.loadState(id)
		if err != nil {
			t.Fatal(err)
		}
		if !st.MemoryFile {
			t.Fatalf("exec %s on btrfs has no RAM file (driver says: %s)", id, d.memFileWhy)
		}
		fi, err := os.Lstat(filepath.Join(stateDir, "exec", id, memFile))
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if fi.Size() != 256<<20 || fi.Mode().Perm() != 0o660 || sys.Uid != 0 || sys.Gid != st.GID {
			t.Errorf("RAM file of %s: %d bytes, mode %v, owner %d:%d; want 256 MiB, 0660, root:%d", id, fi.Size(), fi.Mode(), sys.Uid, sys.Gid, st.GID)
		}
		inodes = append(inodes, sys.Ino)
	}
	if inodes[0] == inodes[1] {
		t.Fatalf("the two VMs map one RAM file (inode %d)", inodes[0])
	}

	t.Run("Isolation", func(t *testing.T) {
		tok := token(t)
		shell(t, a, "echo "+tok+" > /dev/shm/tok; sync")
		if out := shell(t, b, "cat /dev/shm/tok 2>&1; true"); strings.Contains(out, tok) {
			t.Errorf("VM b reads VM a's tmpfs: %q", out)
		}
		if !ramHolds(t, stateDir, "mf-a", tok) {
			t.Errorf("VM a's RAM file does not hold what its guest wrote into tmpfs")
		}
		if ramHolds(t, stateDir, "mf-b", tok) {
			t.Errorf("VM b's RAM file holds what VM a's guest wrote: the two share a page")
		}
	})
	b.Close()
	gone(t, d, stateDir, instB)

	cpDir := filepath.Join(root, "cp")
	tok := token(t)
	t.Run("Checkpoint", func(t *testing.T) {
		shell(t, a, "echo "+tok+" > /dev/shm/keep")
		shell(t, a, "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' </dev/null >/dev/null 2>&1 &")
		for strings.TrimSpace(shell(t, a, "cat /tmp/c 2>/dev/null || echo 0")) < "5" {
			time.Sleep(200 * time.Millisecond)
		}
		cp, err := d.Checkpoint(ctx, "mf-a", cpDir)
		if err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		ram, stream := cp.File(cpRAM), cp.File(cpMemory)
		if ram == nil || ram.Size != 256<<20 {
			t.Fatalf("checkpoint files %+v; want a RAM file of 256 MiB", cp.Files)
		}
		if stream.Size > 16<<20 {
			t.Errorf("the stream of a checkpoint with a RAM file is %d bytes: RAM went through it", stream.Size)
		}
		var meta vmMeta
		if b, err := os.ReadFile(filepath.Join(cpDir, cpMeta)); err != nil || json.Unmarshal(b, &meta) != nil || !meta.MemoryFile {
			t.Errorf("%s = %+v (%v); want memory_file set", cpMeta, meta, err)
		}
		t.Logf("checkpoint: stream %d bytes, RAM file %d MiB", stream.Size, ram.Size>>20)
		a.Close()
		if err := d.Kill(ctx, "mf-a"); err != nil {
			t.Fatal(err)
		}
		gone(t, d, stateDir, instA)
	})
	if t.Failed() {
		return
	}

	// The checkpoint's files settle (driver.VerifiedFiles): the first
	// restore hashes them and the driver remembers them verified.
	time.Sleep(1100 * time.Millisecond)
	var rs [2]*guest.Client
	for i, id := range []string{"mf-r1", "mf-r2"} {
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		hits, hashed := d.verified.Counts()
		inst, err := d.Restore(ctx, driver.Spec{ExecID: id, SandboxID: id}, cp)
		if err != nil {
			t.Fatalf("Restore %s: %v", id, err)
		}
		c, took := connectGuest(t, ctx, inst, time.Now())
		t.Logf("restore %s to Ready: %s", id, took.Round(time.Millisecond))
		rs[i] = c
		defer gone(t, d, stateDir, inst)
		// The second restore reads none of the checkpoint's files again:
		// the RAM file is mapped, not read.
		h, x := d.verified.Counts()
		if i == 1 && (h-hits != uint64(len(cp.Files)) || x != hashed) {
			t.Errorf("restore %s: %d files known and %d hashed again; want all %d known", id, h-hits, x-hashed, len(cp.Files))
		}
	}
	t.Run("RestoreKeepsMemory", func(t *testing.T) {
		for i, c := range rs {
			if out := shell(t, c, "cat /dev/shm/keep"); strings.TrimSpace(out) != tok {
				t.Errorf("restore %d: /dev/shm/keep = %q, want %q", i+1, out, tok)
			}
			n := counter(t, c)
			time.Sleep(500 * time.Millisecond)
			if m := counter(t, c); m <= n || n < 5 {
				t.Errorf("restore %d: counter %d then %d; want the saved process to go on from at least 5", i+1, n, m)
			}
		}
		// Each restore has its own copy: a write in one is not in the
		// other, nor in the checkpoint.
		tok2 := token(t)
		shell(t, rs[0], "echo "+tok2+" > /dev/shm/tok2; sync")
		if out := shell(t, rs[1], "cat /dev/shm/tok2 2>&1; true"); strings.Contains(out, tok2) {
			t.Errorf("restore 2 reads restore 1's tmpfs: %q", out)
		}
		if !ramHolds(t, stateDir, "mf-r1", tok2) || ramHolds(t, stateDir, "mf-r2", tok2) {
			t.Errorf("RAM files: restore 1 holds its write %v, restore 2 holds it %v; want true, false",
				ramHolds(t, stateDir, "mf-r1", tok2), ramHolds(t, stateDir, "mf-r2", tok2))
		}
		if b, err := os.ReadFile(filepath.Join(cpDir, cpRAM)); err != nil || bytes.Contains(b, []byte(tok2)) {
			t.Errorf("the checkpoint's RAM file holds a restored VM's write (read error %v)", err)
		}
	})

	t.Run("MissingRAMFileRefused", func(t *testing.T) {
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(cpDir, cpRAM)
		if err := os.Rename(path, path+".away"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(path+".away", path)
		_, err = d.Restore(ctx, driver.Spec{ExecID: "mf-bad", SandboxID: "mf-bad"}, cp)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "RAM") {
			t.Fatalf("Restore without the RAM file = %v; want FailedPrecondition naming %s and the RAM", err, path)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, "exec", "mf-bad")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused restore created its execution: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("WrongSizeRAMFileRefused", func(t *testing.T) {
		// A copy of the checkpoint whose RAM file is half the VM's memory,
		// with a manifest that agrees (so only the size check can tell).
		bad := filepath.Join(root, "cp-bad")
		if err := os.Mkdir(bad, 0o700); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(cpDir)
		for _, e := range ents {
			if err := vmimage.CloneImage(ctx, filepath.Join(cpDir, e.Name()), filepath.Join(bad, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Truncate(filepath.Join(bad, cpRAM), 128<<20); err != nil {
			t.Fatal(err)
		}
		cp, err := driver.ReadCheckpoint(bad)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cp.Files {
			if cp.Files[i].Name == cpRAM {
				if cp.Files[i], err = driver.DescribeFile(bad, cpRAM); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := cp.WriteManifest(); err != nil {
			t.Fatal(err)
		}
		_, err = d.Restore(ctx, driver.Spec{ExecID: "mf-bad", SandboxID: "mf-bad"}, cp)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "RAM file ram is 134217728 bytes, the VM has 256 MiB") {
			t.Fatalf("Restore with a RAM file of the wrong size = %v; want FailedPrecondition naming the sizes", err)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, "exec", "mf-bad")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused restore created its execution: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("ChangedKnownRAMFileRefused", func(t *testing.T) {
		// The checkpoint's RAM file is known verified (two restores
		// above); a byte changed in place, its modification time set back,
		// makes it hashed again and refused.
		path := filepath.Join(cpDir, cpRAM)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var old [1]byte
		const at = 100 << 20
		if _, err := f.ReadAt(old[:], at); err != nil {
			t.Fatal(err)
		}
		flip := func() {
			t.Helper()
			old[0] ^= 0x40
			if _, err := f.WriteAt(old[:], at); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}
		flip()
		defer f.Close()
		defer flip()
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.Restore(ctx, driver.Spec{ExecID: "mf-bad", SandboxID: "mf-bad"}, cp)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "sha256") {
			t.Fatalf("Restore of a changed RAM file = %v; want FailedPrecondition naming %s and its digest", err, path)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, "exec", "mf-bad")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused restore created its execution: %v", err)
		}
		t.Logf("refused: %v", err)
	})

	t.Run("StreamCheckpointStillRestores", func(t *testing.T) {
		// A driver with RAM files off (the test seam) over the same state:
		// its VMs and checkpoints are of the stream kind, as before RAM
		// files; the driver with them on restores such a checkpoint.
		ds, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: cacheDir, Log: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ds.noMemoryFile = true
		defer ds.Wait()
		inst, c := start(ds, "mf-s")
		if st, err := ds.loadState("mf-s"); err != nil || st.MemoryFile {
			t.Fatalf("state with RAM files off = %+v, %v; want no RAM file", st, err)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, "exec", "mf-s", memFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a VM with RAM files off has a RAM file: %v", err)
		}
		tok3 := token(t)
		shell(t, c, "echo "+tok3+" > /dev/shm/keep")
		sdir := filepath.Join(root, "cp-stream")
		cp, err := ds.Checkpoint(ctx, "mf-s", sdir)
		if err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		if cp.File(cpRAM) != nil || cp.File(cpMemory).Size < 16<<20 {
			t.Errorf("stream checkpoint files %+v; want RAM in the stream, no RAM file", cp.Files)
		}
		c.Close()
		gone(t, ds, stateDir, inst)
		rinst, err := d.Restore(ctx, driver.Spec{ExecID: "mf-sr", SandboxID: "mf-sr"}, cp)
		if err != nil {
			t.Fatalf("Restore of a stream checkpoint: %v", err)
		}
		rc, _ := connectGuest(t, ctx, rinst, time.Now())
		if out := shell(t, rc, "cat /dev/shm/keep"); strings.TrimSpace(out) != tok3 {
			t.Errorf("after a stream restore /dev/shm/keep = %q, want %q", out, tok3)
		}
		if st, err := d.loadState("mf-sr"); err != nil || st.MemoryFile {
			t.Errorf("a VM restored from a stream checkpoint = %+v, %v; want its RAM anonymous, as saved", st, err)
		}
		rc.Close()
		gone(t, d, stateDir, rinst)
	})
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// TestTemplateKeyHasMemoryFile: templates with RAM in the stream and with
// a RAM file never share a snapshot (a restore follows the snapshot's kind).
func TestTemplateKeyHasMemoryFile(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k", SHA256: "k", Minimal: true}, QEMU: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ExecID: "e", SandboxID: "s", RootFS: img, GuestBinary: "/bin/true"}
	keys := map[bool]string{}
	for _, mf := range []bool{false, true} {
		if keys[mf], err = d.templateKey(spec, fi, bootFiles{d.current(), "/c/initrd.cpio"}, AccelTCG, 256, 1, mf); err != nil {
			t.Fatal(err)
		}
	}
	if keys[false] == keys[true] {
		t.Errorf("template keys with and without a RAM file are both %s", keys[true])
	}
}

// TestMemoryFileArgs: a VM with a RAM file maps it shared, as the machine's
// memory, at the VM's size; one without has no backend.
func TestMemoryFileArgs(t *testing.T) {
	for _, machine := range []string{MachineQ35, MachineMicrovm} {
		st := &state{ExecID: "e", MemoryMiB: 384, CPUs: 1, Machine: machine, Accel: AccelTCG, Kernel: "/k", Initrd: "/i", MemoryFile: true}
		args := strings.Join(qemuArgs(st), " ")
		for _, want := range []string{",memory-backend=mem ", "-object memory-backend-file,id=mem,size=384M,mem-path=ram,share=on", "-m 384 "} {
			if !strings.Contains(args, want) {
				t.Errorf("%s: QEMU arguments lack %q: %s", machine, want, args)
			}
		}
		st.PrivateRAM = true
		if args := strings.Join(qemuArgs(st), " "); !strings.Contains(args, "mem-path=ram,share=off") {
			t.Errorf("%s: a VM on the private RAM seam does not map its RAM file share=off: %s", machine, args)
		}
		st.MemoryFile, st.PrivateRAM = false, false
		if args := strings.Join(qemuArgs(st), " "); strings.Contains(args, "memory-backend") {
			t.Errorf("%s: a VM without a RAM file has a memory backend: %s", machine, args)
		}
	}
}

// TestProbeMemoryFiles: no RAM files where the state dir has no reflinks
// (the test's temp dir on ext4 or tmpfs), nor with a QEMU without the
// backend; RAM files on btrfs.
func TestProbeMemoryFiles(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("no qemu-system-x86_64")
	}
	tmp := t.TempDir()
	if probeReflink(tmp) == nil {
		t.Logf("%s has reflinks; the no-reflink case is not covered here", tmp)
	} else if why := probeMemoryFiles(context.Background(), qemu, tmp); !strings.Contains(why, "no reflinks") {
		t.Errorf("probe on a dir without reflinks = %q; want it to say so", why)
	}
	dir := btrfsDir(t, 512<<20)
	if why := probeMemoryFiles(context.Background(), qemu, dir); why != "" {
		t.Errorf("probe on btrfs with %s = %q; want RAM files", qemu, why)
	}
	if why := probeMemoryFiles(context.Background(), "/bin/true", dir); !strings.Contains(why, "memory-backend-file") {
		t.Errorf("probe with a QEMU that lists no backend = %q; want it to say so", why)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the probe left files in %s: %v", dir, ents)
	}
}

// BenchmarkIdlePSS starts 5 VMs (SPACE_BENCH_PSS_VMS) of 256 MiB from one
// template snapshot and reports the mean PSS of their QEMU processes once
// idle (smaps_rollup), with the state under TMPDIR: RAM files on btrfs (a
// reflink of the template's per VM), unless SPACE_BENCH_CHECKPOINT_STREAM=1
// keeps RAM anonymous; SPACE_BENCH_PSS_PRIVATE=1 maps the template's RAM
// file itself share=off into each VM (the measurement seam
// privateTemplateRAM). Run with -benchtime=1x.
func BenchmarkIdlePSS(b *testing.B) {
	f := newFixture(b)
	stateDir := b.TempDir()
	d, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: filepath.Join(stateDir, "cache"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	d.noMemoryFile = os.Getenv("SPACE_BENCH_CHECKPOINT_STREAM") == "1"
	d.privateTemplateRAM = os.Getenv("SPACE_BENCH_PSS_PRIVATE") == "1"
	vms := 5
	if env := os.Getenv("SPACE_BENCH_PSS_VMS"); env != "" {
		if vms, err = strconv.Atoi(env); err != nil || vms < 1 {
			b.Fatalf("SPACE_BENCH_PSS_VMS=%q: want a count of VMs", env)
		}
	}
	defer d.Wait()
	ctx := context.Background()
	for b.Loop() {
		var insts []*driver.Instance
		for i := range vms {
			id := "pss-" + strconv.Itoa(i)
			inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: id, RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Cleanup(ctx, id)
			conn, _ := net.FileConn(inst.Channel)
			inst.Channel.Close()
			c, err := guest.NewClient(conn)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			insts = append(insts, inst)
		}
		time.Sleep(10 * time.Second)
		var pss, rss float64
		for _, inst := range insts {
			p, r := smapsRollup(b, inst.Pid)
			pss += p
			rss += r
		}
		b.ReportMetric(pss/float64(len(insts))/1024, "pss-MiB/vm")
		b.ReportMetric(rss/float64(len(insts))/1024, "rss-MiB/vm")
	}
}

// smapsRollup returns the Pss and Rss of pid in KiB.
func smapsRollup(b *testing.B, pid int) (pss, rss float64) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "Pss:":
			pss = n
		case "Rss:":
			rss = n
		}
	}
	return pss, rss
}

// TestMemoryFileRoom: a VM gets a RAM file only where all of its RAM and
// the reserve fit, since a shared mapping's page the file system has no
// block for kills QEMU with SIGBUS: a small real btrfs is refused for a VM
// its free space cannot hold, with the figures; enough free space is not.
func TestMemoryFileRoom(t *testing.T) {
	dir := btrfsDir(t, 512<<20)
	err := memoryFileRoom(dir, 256, unix.Statfs)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "a RAM file of 256 MiB needs 1280") {
		t.Errorf("room on a 512 MiB btrfs for 256 MiB of RAM: %v; want ResourceExhausted naming the 1280 MiB needed", err)
	}
	free := func(mib uint64) func(string, *unix.Statfs_t) error {
		return func(_ string, fs *unix.Statfs_t) error { fs.Bsize, fs.Bavail = 4096, mib<<20/4096; return nil }
	}
	if err := memoryFileRoom(dir, 512, free(512+memFileReserveMiB)); err != nil {
		t.Errorf("room with exactly the RAM and the reserve free: %v", err)
	}
	if err := memoryFileRoom(dir, 512, free(512+memFileReserveMiB-1)); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("room with 1 MiB short: %v; want ResourceExhausted", err)
	}
	if err := memoryFileRoom(dir, 512, func(string, *unix.Statfs_t) error { return syscall.EIO }); err == nil || !strings.Contains(err.Error(), "statfs") {
		t.Errorf("room when statfs fails: %v; want the statfs error", err)
	}
}
