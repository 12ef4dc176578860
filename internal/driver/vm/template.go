package vm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
)

// Template snapshots: the first Start of a root image (with one kernel,
// guest binary, accelerator and VM size) boots a scratch VM, waits until its
// guest daemon answers, disconnects, and saves it; that Start and every later
// one with the same inputs restore from the save instead of booting.
const (
	// templateRetry is how long a failed build is not retried (Starts boot
	// meanwhile).
	templateRetry = 5 * time.Minute
	// templateBuildTimeout bounds one build: a cold boot, the guest's first
	// answer and the save.
	templateBuildTimeout = 3 * time.Minute
	// templateSettleTimeout bounds the wait for the guest to close the
	// scratch session and open its channel again.
	templateSettleTimeout = 30 * time.Second
)

// templates is the driver's memory of template snapshots.
type templates struct {
	sf     singleflight.Group
	mu     sync.Mutex
	ready  map[string]*driver.Checkpoint
	failed map[string]templateFailure
}

type templateFailure struct {
	at  time.Time
	err error
}

func (t *templates) init() {
	t.ready = map[string]*driver.Checkpoint{}
	t.failed = map[string]templateFailure{}
}

// templateKey names the snapshot of spec's inputs: the root image (by path,
// device, inode, size, change times: images are built once and replaced, not
// edited), the kernel's digest, the initramfs (named by its content hash),
// the accelerator, the machine type, the network interface, the VM's size,
// and the QEMU binary.
func (d *Driver) templateKey(spec driver.Spec, image fs.FileInfo, boot bootFiles, accel string, memMiB, cpus int, memoryFile bool) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "space-vm-template-v1\n")
	for _, fi := range []fs.FileInfo{image, nil} {
		if fi == nil {
			var err error
			if fi, err = os.Stat(d.cfg.QEMU); err != nil {
				return "", fmt.Errorf("template snapshot key: %w", err)
			}
		}
		sys, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", errors.New("template snapshot key: no stat data")
		}
		fmt.Fprintf(h, "%d %d %d %d %d.%d\n", sys.Dev, sys.Ino, fi.Size(), fi.ModTime().UnixNano(), sys.Ctim.Sec, sys.Ctim.Nsec)
	}
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n%d %d\n", spec.RootFS, d.cfg.QEMU, boot.kernel.SHA256, filepath.Base(boot.initrd), accel, memMiB, cpus)
	// q35 keys stay what they were before machines were recorded, so the
	// snapshots already saved stay valid.
	if boot.machine != MachineQ35 {
		fmt.Fprintf(h, "machine %s\n", boot.machine)
	}
	// The network is part of the key (the NIC is a device of the saved
	// machine, and the template's guest configured it at boot); keys of
	// VMs without one stay what they were, likewise.
	if spec.Network {
		fmt.Fprintf(h, "network\n")
	}
	// A snapshot's RAM is in the stream or a file (memfile.go): the two
	// kinds are built apart, so a host that starts using RAM files builds
	// its templates anew; keys of stream snapshots stay what they were.
	if memoryFile {
		fmt.Fprintf(h, "memory file\n")
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// startFromTemplate restores spec from its template snapshot, building the
// snapshot first if there is none. An error means the caller should boot.
func (d *Driver) startFromTemplate(ctx context.Context, spec driver.Spec, image fs.FileInfo, boot bootFiles) (*driver.Instance, error) {
	accel := d.chooseAccel(ctx, boot.kernel.Vmlinuz, boot.initrd)
	spec.MemoryMiB = orDefault(spec.MemoryMiB, d.cfg.DefaultMemoryMiB)
	spec.CPUs = max(spec.CPUs, 1)
	key, err := d.templateKey(spec, image, boot, accel, spec.MemoryMiB, spec.CPUs, d.memoryFiles(ctx))
	if err != nil {
		return nil, err
	}
	cp, err := d.templateSnapshot(ctx, key, spec, boot)
	if err != nil {
		if ctx.Err() == nil {
			d.templateFailures.Add(1)
		}
		return nil, err
	}
	inst, err := d.restore(ctx, spec, cp, originTemplate)
	if err != nil && ctx.Err() == nil && !errors.Is(err, errdefs.ErrConflict) {
		// A snapshot that does not restore is rebuilt after the retry delay.
		d.templateFailures.Add(1)
		d.templates.mu.Lock()
		delete(d.templates.ready, key)
		d.templates.failed[key] = templateFailure{at: time.Now(), err: err}
		d.templates.mu.Unlock()
		if rerr := os.RemoveAll(cp.Dir); rerr != nil {
			d.log.Error("remove a template snapshot that does not restore", "dir", cp.Dir, "err", rerr)
		}
	}
	return inst, err
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// templateSnapshot returns the snapshot called key: remembered, on disk, or
// built now (once for concurrent callers, each of whom may give up with its
// ctx while the build goes on).
func (d *Driver) templateSnapshot(ctx context.Context, key string, spec driver.Spec, boot bootFiles) (*driver.Checkpoint, error) {
	t := &d.templates
	t.mu.Lock()
	cp, failed := t.ready[key], t.failed[key]
	t.mu.Unlock()
	if cp != nil {
		return cp, nil
	}
	if failed.err != nil && time.Since(failed.at) < templateRetry {
		return nil, fmt.Errorf("template snapshot failed %s ago (retried %s after): %w", time.Since(failed.at).Round(time.Second), templateRetry, failed.err)
	}
	dir := filepath.Join(d.cfg.CacheDir, "snapshots", key)
	if cp, err := driver.ReadCheckpoint(dir); err == nil {
		t.remember(key, cp, nil)
		return cp, nil
	}
	ch := t.sf.DoChan(key, func() (any, error) {
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), templateBuildTimeout)
		defer cancel()
		cp, err := d.buildTemplate(bctx, key, dir, spec, boot)
		t.remember(key, cp, err)
		return cp, err
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*driver.Checkpoint), nil
	}
}

func (t *templates) remember(key string, cp *driver.Checkpoint, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.failed[key] = templateFailure{at: time.Now(), err: err}
		return
	}
	t.ready[key] = cp
	delete(t.failed, key)
}

// scratchID names a scratch VM for the template snapshot of key: the
// prefix, the key, and the pid and start time of the process booting it,
// so that a scratch VM whose builder died (a node-manager killed during a
// template build) is told from one being built (scratchLeftover).
func scratchID(key string) string {
	var rnd [4]byte
	rand.Read(rnd[:])
	pid := os.Getpid()
	start, _ := driver.ProcStartTime(pid)
	return fmt.Sprintf("%s%s-%d-%d-%s", scratchPrefix, key[:min(16, len(key))], pid, start, hex.EncodeToString(rnd[:]))
}

// buildTemplate boots a scratch VM for spec, waits for its guest, saves it
// into dir and removes the scratch VM.
func (d *Driver) buildTemplate(ctx context.Context, key, dir string, spec driver.Spec, boot bootFiles) (*driver.Checkpoint, error) {
	t0 := time.Now()
	d.templateBuilds.Add(1)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("template snapshot: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".build-")
	if err != nil {
		return nil, fmt.Errorf("template snapshot: %w", err)
	}
	defer os.RemoveAll(tmp)
	scratch := driver.Spec{
		ExecID:    scratchID(key),
		SandboxID: "template", RootFS: spec.RootFS, GuestBinary: spec.GuestBinary,
		MemoryMiB: spec.MemoryMiB, CPUs: spec.CPUs, Network: spec.Network,
	}
	inst, err := d.coldStart(ctx, scratch, boot)
	if err != nil {
		return nil, fmt.Errorf("template snapshot: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := d.Cleanup(cctx, scratch.ExecID); err != nil {
			d.log.Error("remove the template's scratch VM", "exec", scratch.ExecID, "err", err)
		}
	}()
	cpDir := filepath.Join(tmp, "cp")
	cp, booted, err := d.saveTemplate(ctx, inst, cpDir, t0)
	if err != nil {
		return nil, fmt.Errorf("template snapshot of exec %s: %w", scratch.ExecID, err)
	}
	if err := os.Rename(cpDir, dir); err != nil {
		// Another process saved the same template first: use that one.
		if other, rerr := driver.ReadCheckpoint(dir); rerr == nil {
			return other, nil
		}
		return nil, fmt.Errorf("template snapshot: %w", err)
	}
	cp.Dir = dir
	if err := cp.WriteManifest(); err != nil {
		return nil, err
	}
	d.log.Info("template snapshot built", "key", key, "image", spec.RootFS, "memory_mib", spec.MemoryMiB,
		"boot_to_ready", booted.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	return cp, nil
}

// saveTemplate waits until the scratch VM's guest answers, disconnects from
// it, waits until the guest has ended that session and opened its channel
// again (so a restored copy waits for its new host), and checkpoints it. It
// also returns the time from t0 to the guest's first answer.
func (d *Driver) saveTemplate(ctx context.Context, inst *driver.Instance, dir string, t0 time.Time) (*driver.Checkpoint, time.Duration, error) {
	// Nothing reads the scratch VM's network: QEMU drops the guest's frames
	// once the link is closed.
	inst.Link.Close()
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		return nil, 0, fmt.Errorf("guest channel: %w", err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		return nil, 0, err
	}
	if err := c.Wait(ctx); err != nil {
		c.Close()
		return nil, 0, fmt.Errorf("the guest did not answer: %w", err)
	}
	ready := time.Since(t0)
	st, err := d.loadState(inst.ExecID)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	s, err := d.openQMP(ctx, st)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	defer s.Close()
	// The port stays open while the guest serves: the next event on it
	// comes from the guest ending that session.
	c.Close()
	err = s.waitEvents(templateSettleTimeout, func(ev []*qmpMessage) bool {
		return reopened(portEvents(ev, channelPortID), 0)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("the guest did not reopen its channel after the host left (port events %v): %w (console: %s)",
			portEvents(s.events, channelPortID), err, tailFile(filepath.Join(d.execDir(st.ExecID), consoleLog), 1024))
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, 0, err
	}
	cp, meta, err := d.checkpoint(ctx, s, st, dir)
	if err != nil {
		return nil, 0, err
	}
	if meta.HostConnected {
		return nil, 0, errors.New("a host connected to the scratch VM's channel during the save")
	}
	return cp, ready, nil
}
