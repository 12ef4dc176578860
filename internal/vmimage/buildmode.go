package vmimage

import "fmt"

// The vm runtime's kernel at node start (the node-manager's --kernel-build,
// which `space server --dev` passes on). The minimal kernel boots on the
// microvm machine in well under half the time of Debian's cloud kernel on
// q35 (docs/PERFORMANCE.md), but is compiled from Debian's sources: 10 to
// 25 minutes on a 2-core host. A node does not wait for it: it starts on
// the cloud kernel (a package download, seconds) and moves new VMs to the
// minimal kernel when it is ready.
const (
	// KernelBuildBackground builds the minimal kernel in the background,
	// at low CPU priority, when the cache has none (the default).
	KernelBuildBackground = "background"
	// KernelBuildWait never builds, but moves to a minimal kernel that
	// another process is building into the same cache (`make test` does).
	KernelBuildWait = "wait"
	// KernelBuildOff uses the minimal kernel only if it is built at start.
	KernelBuildOff = "off"
)

// ValidKernelBuild checks a --kernel-build value.
func ValidKernelBuild(mode string) error {
	switch mode {
	case KernelBuildBackground, KernelBuildWait, KernelBuildOff:
		return nil
	}
	return fmt.Errorf("--kernel-build %q: want background, wait or off", mode)
}
