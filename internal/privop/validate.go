package privop

import (
	"fmt"
	"regexp"

	"github.com/spacesandbox/space/internal/errdefs"
)

var (
	execIDPattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	templatePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	hostnamePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidArgument}, args...)...)
}

// ValidExecID reports whether id is a well-formed execution id.
func ValidExecID(id string) error {
	if !execIDPattern.MatchString(id) {
		return invalid("exec id %q: want 1-64 of [a-z0-9-], starting with a letter or digit", id)
	}
	return nil
}

// ValidTemplateName reports whether name is a well-formed template name.
func ValidTemplateName(name string) error {
	if !templatePattern.MatchString(name) {
		return invalid("template name %q: want 1-63 of [a-z0-9._-], starting with a letter or digit", name)
	}
	return nil
}

// DefaultDiskMiB is the disk limit of an execution started without one (a
// warm-pool preparation, a request from an older control plane): the
// control plane's default disk size (sandbox.DefaultDiskMiB).
const DefaultDiskMiB = 2048

// DiskBytes is the execution's disk limit in bytes.
func (a *StartArgs) DiskBytes() uint64 {
	if a.DiskMiB == 0 {
		return DefaultDiskMiB << 20
	}
	return uint64(a.DiskMiB) << 20
}

func (a *StartArgs) Validate(runtimes map[string]bool) error {
	if a == nil {
		return invalid("start: missing arguments")
	}
	if err := ValidExecID(a.ExecID); err != nil {
		return err
	}
	if a.SandboxID == "" || len(a.SandboxID) > 64 || !execIDPattern.MatchString(a.SandboxID) {
		return invalid("sandbox id %q is malformed", a.SandboxID)
	}
	if err := ValidTemplateName(a.Template); err != nil {
		return err
	}
	if !runtimes[a.Runtime] {
		return invalid("runtime %q is not available on this node", a.Runtime)
	}
	if a.Snapshot != "" {
		if err := ValidSnapshotID(a.Snapshot); err != nil {
			return err
		}
	}
	if !hostnamePattern.MatchString(a.Hostname) {
		return invalid("hostname %q is not a valid DNS label", a.Hostname)
	}
	if a.CPUs < 1 || a.CPUs > 64 {
		return invalid("cpus %d: want 1..64", a.CPUs)
	}
	if a.MemoryMiB < 32 || a.MemoryMiB > 1<<20 {
		return invalid("memory %d MiB: want 32..1048576", a.MemoryMiB)
	}
	if a.PidsMax < 16 || a.PidsMax > 1<<16 {
		return invalid("pids max %d: want 16..65536", a.PidsMax)
	}
	if a.DiskMiB != 0 && (a.DiskMiB < 16 || a.DiskMiB > 1<<20) {
		return invalid("disk %d MiB: want 16..1048576, or 0 for the default", a.DiskMiB)
	}
	return nil
}
