package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/guestinit"
	"github.com/spacesandbox/space/internal/pinnedproc"
)

// probeResult is the accelerator probe's outcome, cached in
// CacheDir/accel.json for one host boot and one QEMU binary.
type probeResult struct {
	BootID string `json:"boot_id"`
	QEMU   string `json:"qemu"`
	Accel  string `json:"accel"`
	Reason string `json:"reason"`
}

// chooseAccel returns the accelerator for new VMs: the configured one, else
// the probe's cached or fresh result. /dev/kvm opening is not enough: on a
// host that is itself a guest (nested or PVM) KVM may hang a standard guest,
// so the probe boots one.
func (d *Driver) chooseAccel(ctx context.Context, kernel, initrd string) string {
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	if d.accel != AccelAuto {
		return d.accel
	}
	bootID, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	cacheFile := filepath.Join(d.cfg.CacheDir, "accel.json")
	var cached probeResult
	if b, err := os.ReadFile(cacheFile); err == nil && json.Unmarshal(b, &cached) == nil &&
		cached.BootID == strings.TrimSpace(string(bootID)) && cached.QEMU == d.cfg.QEMU &&
		(cached.Accel == AccelKVM || cached.Accel == AccelTCG) {
		d.accel = cached.Accel
		d.log.Info("accelerator (probed earlier this host boot)", "accel", cached.Accel, "reason", cached.Reason)
		return d.accel
	}
	res := probeResult{BootID: strings.TrimSpace(string(bootID)), QEMU: d.cfg.QEMU, Accel: AccelTCG}
	if err := d.probeKVM(ctx, kernel, initrd); err != nil {
		res.Reason = err.Error()
		d.log.Warn("KVM cannot boot a guest on this host: using TCG emulation (much slower)", "reason", res.Reason)
	} else {
		res.Accel, res.Reason = AccelKVM, "probe boot reached the guest init"
		d.log.Info("KVM boots guests on this host: using it")
	}
	if b, err := json.Marshal(res); err == nil {
		_ = os.WriteFile(cacheFile, b, 0o600)
	}
	d.accel = res.Accel
	return d.accel
}

// probeKVM boots the guest kernel and initramfs under KVM with a probe
// configuration (the guest init prints its marker and powers off) and
// reports whether the marker arrived in time.
func (d *Driver) probeKVM(ctx context.Context, kernel, initrd string) error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	f.Close()
	dir, err := os.MkdirTemp(d.cfg.CacheDir, ".probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, guestConfig), []byte(`{"probe":true}`), 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.cfg.QEMU,
		"-M", "q35", "-accel", "kvm", "-cpu", "host", "-m", "128", "-smp", "1",
		"-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 -- --init --channel virtio:space.0",
		"-fw_cfg", "name="+guestinit.FWCfgName+",file="+guestConfig,
		"-serial", "stdio")
	cmd.Dir = dir
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Pdeathsig: unix.SIGKILL}
	cmd.WaitDelay = time.Second
	// A pipe of this function's own (not StdoutPipe, which Wait closes):
	// Wait runs on the pinned thread that started QEMU, whose parent-death
	// signal must not come from another of this process's threads ending.
	out, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout = w
	t0 := time.Now()
	child, err := pinnedproc.Start(cmd)
	w.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", d.cfg.QEMU, err)
	}
	found := false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		if strings.Contains(sc.Text(), guestinit.StartedMarker) {
			found = true
			break
		}
	}
	cancel()
	_ = child.Wait()
	if !found {
		return fmt.Errorf("a KVM guest did not reach its init within %s", d.cfg.ProbeTimeout)
	}
	d.log.Debug("KVM probe booted", "elapsed", time.Since(t0))
	return nil
}
