package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// File-backed guest RAM (issue 20 item 4). Where the execution directories
// are on a file system with reflinks (the node's btrfs volume store) and
// QEMU has memory-backend-file, a VM's RAM is the file ram in its execution
// directory, mapped by QEMU with share=on. A full snapshot then leaves RAM
// out of the migration stream (the x-ignore-shared capability): the stream
// holds only the device state, and the RAM file is reflinked into the
// checkpoint. A restore reflinks the checkpoint's RAM file into the new
// execution's directory and maps it: each VM has its own copy-on-write file,
// so two VMs restored from one checkpoint share clean extents on disk but
// never a writable page.
//
// Elsewhere (execution directories on ext4 or tmpfs, which have no
// reflinks; a QEMU without the backend) RAM stays anonymous and the stream
// carries it, as before. The driver decides once, at its first VM, and logs
// which.
const (
	// memFile is the RAM file in an execution's directory.
	memFile = "ram"
	// cpRAM is the RAM file in a checkpoint (MemoryFile checkpoints only).
	cpRAM = "ram"
	// memBackendID is the QEMU object id of the RAM backend.
	memBackendID = "mem"
)

// memoryFileArgs are the QEMU arguments that back st's RAM with memFile.
func memoryFileArgs(st *state) []string {
	share := "on"
	if st.PrivateRAM {
		share = "off"
	}
	return []string{"-object", "memory-backend-file,id=" + memBackendID + ",size=" + strconv.Itoa(st.MemoryMiB) + "M,mem-path=" + memFile + ",share=" + share}
}

// memoryFiles reports whether new VMs get a file-backed RAM, probing once.
func (d *Driver) memoryFiles(ctx context.Context) bool {
	d.memFileOnce.Do(func() {
		if d.noMemoryFile {
			d.memFileWhy = "turned off (test seam)"
		} else {
			d.memFileWhy = probeMemoryFiles(ctx, d.cfg.QEMU, filepath.Join(d.cfg.StateDir, "exec"))
		}
		d.memFileOn = d.memFileWhy == ""
		if d.memFileOn {
			d.log.Info("vm memory: file-backed RAM (full snapshots reflink it)", "dir", filepath.Join(d.cfg.StateDir, "exec"))
		} else {
			d.log.Info("vm memory: anonymous RAM, saved through the migration stream", "why", d.memFileWhy)
		}
	})
	return d.memFileOn
}

// probeMemoryFiles returns why dir cannot hold file-backed RAM for qemu,
// or "" when it can: a file in dir can be reflinked (FICLONE), and qemu
// knows memory-backend-file with share.
func probeMemoryFiles(ctx context.Context, qemu, dir string) string {
	if err := probeReflink(dir); err != nil {
		return fmt.Sprintf("no reflinks in %s (%v): the RAM file would be copied at every snapshot", dir, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(pctx, qemu, "-object", "memory-backend-file,help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("share=")) || !bytes.Contains(out, []byte("mem-path=")) {
		return fmt.Sprintf("%s has no memory-backend-file with share and mem-path (%v): %s", qemu, err, tailBytes(out, 256))
	}
	return ""
}

// probeReflink clones a small file into another in dir.
func probeReflink(dir string) error {
	src, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write(make([]byte, 4096)); err != nil {
		return err
	}
	dst, err := os.CreateTemp(dir, ".reflink-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return fmt.Errorf("FICLONE: %w", err)
	}
	return nil
}

// memFileReserveMiB is the free space a volume store keeps beyond a new
// VM's whole RAM before the VM gets a RAM file there. A page of a shared file
// mapping that the guest writes needs a block of the file system (a
// reflinked one a copy); with none left the kernel answers the write with
// SIGBUS and QEMU dies. So a RAM file is given only where all of the VM's RAM
// fits with room to spare; elsewhere the VM's RAM is anonymous (a fresh
// start) or its restore is refused (a checkpoint whose RAM is a file).
const memFileReserveMiB = 1024

// memoryFileRoom returns an error (ResourceExhausted) unless the file system
// of dir has memMiB + memFileReserveMiB free for an unprivileged writer.
func memoryFileRoom(dir string, memMiB int, statfs func(string, *unix.Statfs_t) error) error {
	var fs unix.Statfs_t
	if err := statfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	free := int64(fs.Bavail) * int64(fs.Bsize) >> 20
	if need := int64(memMiB + memFileReserveMiB); free < need {
		return fmt.Errorf("%w: %s has %d MiB free, a RAM file of %d MiB needs %d (its size and a %d MiB reserve): free space on the node's volume store",
			errdefs.ErrResourceExhausted, dir, free, memMiB, need, memFileReserveMiB)
	}
	return nil
}

// createMemoryFile creates st's empty RAM file of the VM's size (sparse:
// the guest's pages take space as it writes them).
func (d *Driver) createMemoryFile(st *state) error {
	f, err := os.OpenFile(filepath.Join(d.execDir(st.ExecID), memFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create the RAM file: %w", err)
	}
	err = f.Truncate(int64(st.MemoryMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size the RAM file: %w", err)
	}
	return nil
}

// checkRAMFile checks that a checkpoint's RAM file f has the VM's size.
func checkRAMFile(f *os.File, dir string, memMiB int) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if want := int64(memMiB) << 20; fi.Size() != want {
		return fmt.Errorf("checkpoint %s: RAM file %s is %d bytes, the VM has %d MiB (%d bytes): not this VM's memory; take a new checkpoint",
			dir, cpRAM, fi.Size(), memMiB, want)
	}
	return nil
}

// tailBytes returns at most the last n bytes of b.
func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
