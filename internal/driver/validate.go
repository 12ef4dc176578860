package driver

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Limits on Spec fields. They bound what a caller can ask of one node, not what
// a sandbox plan may offer.
const (
	// MaxCPUs is the largest CPU cap accepted.
	MaxCPUs = 1024
	// MaxMemoryMiB is the largest memory cap accepted (4 TiB).
	MaxMemoryMiB = 4 << 20
	// MinMemoryMiB is the smallest memory cap that lets a guest daemon start.
	MinMemoryMiB = 16
	// MaxPids is the largest task cap accepted.
	MaxPids = 1 << 22
	// MinPids is the smallest task cap that lets a guest daemon start.
	MinPids = 8
	// MaxEnvBytes bounds the total size of Spec.Env (keys plus values).
	MaxEnvBytes = 64 << 10
)

// ValidID reports whether id is a valid execution or sandbox id: 1 to 64
// characters from [a-z0-9-].
func ValidID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("%w: id %q: want 1 to 64 characters", errdefs.ErrInvalidArgument, id)
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%w: id %q: only a-z, 0-9 and - are allowed", errdefs.ErrInvalidArgument, id)
		}
	}
	return nil
}

// ValidHostPath reports whether p is an absolute, clean path without NUL.
func ValidHostPath(what, p string) error {
	if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) || p == "/" {
		return fmt.Errorf("%w: %s %q: want an absolute, clean path other than /", errdefs.ErrInvalidArgument, what, p)
	}
	return nil
}

// ValidHostname reports whether h is a valid host name (RFC 1123 labels,
// lower case, at most 63 characters so it fits every kernel field).
func ValidHostname(h string) error {
	if len(h) == 0 || len(h) > 63 {
		return fmt.Errorf("%w: hostname %q: want 1 to 63 characters", errdefs.ErrInvalidArgument, h)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%w: hostname %q: empty label or label starting or ending with -", errdefs.ErrInvalidArgument, h)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%w: hostname %q: only a-z, 0-9, - and . are allowed", errdefs.ErrInvalidArgument, h)
			}
		}
	}
	return nil
}

// Validate checks every field of s.
func (s *Spec) Validate() error {
	if err := ValidID(s.ExecID); err != nil {
		return fmt.Errorf("exec id: %w", err)
	}
	if err := ValidID(s.SandboxID); err != nil {
		return fmt.Errorf("sandbox id: %w", err)
	}
	if err := ValidHostPath("rootfs", s.RootFS); err != nil {
		return err
	}
	if err := ValidHostPath("guest binary", s.GuestBinary); err != nil {
		return err
	}
	if s.Hostname != "" {
		if err := ValidHostname(s.Hostname); err != nil {
			return err
		}
	}
	if s.CPUs < 0 || s.CPUs > MaxCPUs {
		return fmt.Errorf("%w: cpus %d: want 0 (no cap) to %d", errdefs.ErrInvalidArgument, s.CPUs, MaxCPUs)
	}
	if s.MemoryMiB != 0 && (s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB) {
		return fmt.Errorf("%w: memory %d MiB: want 0 (default) or %d to %d", errdefs.ErrInvalidArgument, s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	}
	if s.PidsMax != 0 && (s.PidsMax < MinPids || s.PidsMax > MaxPids) {
		return fmt.Errorf("%w: pids max %d: want 0 (default) or %d to %d", errdefs.ErrInvalidArgument, s.PidsMax, MinPids, MaxPids)
	}
	return validEnv(s.Env)
}

func validEnv(env map[string]string) error {
	total := 0
	for k, v := range env {
		total += len(k) + len(v) + 2
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env %q: names must be non-empty without = or NUL, values without NUL", errdefs.ErrInvalidArgument, k)
		}
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("%w: env is %d bytes, at most %d allowed", errdefs.ErrInvalidArgument, total, MaxEnvBytes)
	}
	return nil
}
