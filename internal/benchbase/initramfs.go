package benchbase

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spacesandbox/space/internal/vmimage"
)

// Modes of the guest's /init, its first argument (put after "--" on the
// kernel command line).
const (
	// modeBoot prints the boot marker and reboots, which ends QEMU.
	modeBoot = "boot"
	// modeTick prints the boot marker, then a counter line every 10 ms.
	modeTick = "tick"
)

// initScript is the guest's /init, run by busybox's shell. The loop forks
// nothing: echo is a builtin and Debian's static busybox runs usleep inside
// the shell (a standalone shell with no-fork applets), so a counter line
// needs no process to start. Every mode
// prints the boot marker first (the vm driver's accelerator probe passes
// arguments of its own and waits for it). reboot -f resets the machine at
// once; with -no-reboot that ends QEMU (on microvm, without ACPI, through
// the triple fault reboot=t asks for).
var initScript = `#!/bin/busybox sh
echo "` + bootMarker + `"
if [ "$1" = "` + modeTick + `" ]; then
	i=0
	while :; do
		echo "` + tickPrefix + `$i"
		i=$((i+1))
		usleep 10000
	done
fi
exec /bin/busybox reboot -f
`

// writeInitramfs writes the guest's initramfs to w, an uncompressed newc
// archive (as the vm runtime's): /dev/console (which the kernel opens for
// init's standard streams), /bin/busybox from the host path busybox, and
// /init.
func writeInitramfs(w io.Writer, busybox string) error {
	c := vmimage.NewCPIO(w)
	for _, d := range []string{"bin", "dev"} {
		if err := c.AddDir(d, 0o755); err != nil {
			return err
		}
	}
	if err := c.AddCharDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := c.AddHostFile("bin/busybox", busybox, 0o755); err != nil {
		return err
	}
	if err := c.AddFile("init", 0o755, int64(len(initScript)), strings.NewReader(initScript)); err != nil {
		return err
	}
	return c.Close()
}

// buildInitramfs writes the guest's initramfs into the file path.
func buildInitramfs(path, busybox string) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	err = writeInitramfs(bw, busybox)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	return nil
}
