package sandbox

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Limits and defaults of a create request. Every bound keeps one request from
// taking an unbounded share of the store or of a node.
const (
	DefaultTemplate  = "base"
	DefaultCPUs      = 1
	DefaultMemoryMiB = 512
	DefaultDiskMiB   = 2048

	MinCPUs, MaxCPUs           = 1, 16
	MinMemoryMiB, MaxMemoryMiB = 64, 65536
	MinDiskMiB, MaxDiskMiB     = 256, 1 << 20 // 256 MiB .. 1 TiB
	MaxTimeout                 = 365 * 24 * time.Hour

	MaxNameLen       = 128
	MaxEnvEntries    = 256
	MaxEnvKeyLen     = 256
	MaxEnvValueLen   = 32 << 10
	MaxEnvTotal      = 256 << 10
	MaxMetaEntries   = 64
	MaxMetaKeyLen    = 128
	MaxMetaValueLen  = 1024
	maxTemplateName  = 63
	runtimeVM        = "vm"
	runtimeNamespace = "ns"
)

// Spec is a validated create request with defaults applied.
type Spec struct {
	Template  string
	Runtime   string // "vm", "ns", or empty for the server's default
	Name      string
	CPUs      int
	MemoryMiB int
	DiskMiB   int
	Env       map[string]string
	Metadata  map[string]string
	// Timeout is how long the sandbox lives; zero means no timeout.
	Timeout time.Duration
	// IdleTimeout and IdleAction: see Sandbox.
	IdleTimeout time.Duration
	IdleAction  string
	// Egress is the sandbox's egress policy; ValidateCreate leaves it nil
	// (the caller parses the request's policy and applies its default).
	Egress *egress.Policy
	// Project is the sandbox's project (credential scopes); empty: none.
	Project string
}

// ValidateCreate checks a create request from the API and returns it as a
// Spec with defaults applied. Every error is of class ErrInvalidArgument and its
// message names the field and the rule, fit to show to the caller.
func ValidateCreate(req sandboxv1.CreateSandboxRequest) (Spec, error) {
	spec := Spec{
		Template:  req.Template,
		Runtime:   req.Runtime,
		Name:      req.Name,
		CPUs:      orDefault(req.CPUs, DefaultCPUs),
		MemoryMiB: orDefault(req.MemoryMiB, DefaultMemoryMiB),
		DiskMiB:   orDefault(req.DiskMiB, DefaultDiskMiB),
		Env:       req.Env,
		Metadata:  req.Metadata,
		Project:   req.Project,
	}
	if spec.Template == "" {
		spec.Template = DefaultTemplate
	}
	checks := []error{
		ValidateTemplateName(spec.Template),
		validateRuntime(spec.Runtime),
		validateName(spec.Name),
		inRange("cpus", spec.CPUs, MinCPUs, MaxCPUs),
		inRange("memory_mib", spec.MemoryMiB, MinMemoryMiB, MaxMemoryMiB),
		inRange("disk_mib", spec.DiskMiB, MinDiskMiB, MaxDiskMiB),
		ValidateEnv(spec.Env),
		validateMetadata(spec.Metadata),
		ValidateProject(spec.Project),
	}
	for _, err := range checks {
		if err != nil {
			return Spec{}, err
		}
	}
	timeout, err := ParseTimeout(req.Timeout)
	if err != nil {
		return Spec{}, err
	}
	spec.Timeout = timeout
	if spec.IdleTimeout, spec.IdleAction, err = ParseIdle(req.IdleTimeout, req.IdleAction); err != nil {
		return Spec{}, err
	}
	return spec, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

func inRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return invalid("%s %d: must be between %d and %d", field, v, lo, hi)
	}
	return nil
}

// ValidateTemplateName checks a template name: 1 to 63 characters of
// [a-z0-9._-], starting with a letter or digit. Names become directory names
// on nodes, so nothing else is allowed.
func ValidateTemplateName(name string) error {
	if name == "" || len(name) > maxTemplateName {
		return invalid("template name %q: must be 1 to %d characters", clip(name), maxTemplateName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return invalid("template name %q: use lowercase letters, digits, '.', '_' and '-', starting with a letter or digit", clip(name))
		}
	}
	return nil
}

func validateRuntime(r string) error {
	switch r {
	case "", runtimeVM, runtimeNamespace:
		return nil
	}
	return invalid("runtime %q: must be %q or %q", clip(r), runtimeVM, runtimeNamespace)
}

func validateName(name string) error {
	if len(name) > MaxNameLen {
		return invalid("name: longer than %d bytes", MaxNameLen)
	}
	if !printable(name) {
		return invalid("name %q: must be printable UTF-8", clip(name))
	}
	return nil
}

// ValidateEnv checks environment variables for a sandbox or a command: keys
// are non-empty and hold neither '=' nor NUL, values hold no NUL, and the
// count and sizes are bounded.
func ValidateEnv(env map[string]string) error {
	if len(env) > MaxEnvEntries {
		return invalid("env: more than %d variables", MaxEnvEntries)
	}
	total := 0
	for k, v := range env {
		switch {
		case k == "":
			return invalid("env: empty variable name")
		case len(k) > MaxEnvKeyLen:
			return invalid("env %q: name longer than %d bytes", clip(k), MaxEnvKeyLen)
		case strings.ContainsAny(k, "=\x00"):
			return invalid("env %q: name must not contain '=' or NUL", clip(k))
		case ReservedEnv(k):
			return invalid("env %q: reserved for the platform; use another name", clip(k))
		case len(v) > MaxEnvValueLen:
			return invalid("env %q: value longer than %d bytes", clip(k), MaxEnvValueLen)
		case strings.IndexByte(v, 0) >= 0:
			return invalid("env %q: value must not contain NUL", clip(k))
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvTotal {
		return invalid("env: %d bytes in total, more than %d", total, MaxEnvTotal)
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetaEntries {
		return invalid("metadata: more than %d entries", MaxMetaEntries)
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > MaxMetaKeyLen:
			return invalid("metadata key %q: must be 1 to %d bytes", clip(k), MaxMetaKeyLen)
		case !printable(k):
			return invalid("metadata key %q: must be printable UTF-8", clip(k))
		case ReservedMetadataKey(k):
			return invalid("metadata key %q: the space. and e2b. prefixes are reserved for the platform; use another key", clip(k))
		case len(v) > MaxMetaValueLen:
			return invalid("metadata %q: value longer than %d bytes", clip(k), MaxMetaValueLen)
		case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
			return invalid("metadata %q: value must be UTF-8 without NUL", clip(k))
		}
	}
	return nil
}

// ParseTimeout parses a sandbox timeout: empty for none, else a positive Go
// duration ("30m", "2h") of at most MaxTimeout.
func ParseTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid("timeout %q: not a duration like \"30m\" or \"2h\"", clip(s))
	}
	if d <= 0 || d > MaxTimeout {
		return 0, invalid("timeout %s: must be positive and at most %s", d, MaxTimeout)
	}
	return d, nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// clip shortens untrusted text before it is quoted in an error message.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ValidateName checks a sandbox's optional name (as at create).
func ValidateName(name string) error { return validateName(name) }

// Idle actions: what is done to a sandbox that went its idle timeout
// without a request. The first two are undone by the next request; the
// last two only by an explicit resume or start (E2B's onTimeout "pause"
// without autoResume, and its filesystem-only pause).
const (
	IdlePause     = "pause"
	IdleHibernate = "hibernate"
	// IdlePauseHeld pauses the sandbox; requests do not wake it.
	IdlePauseHeld = "pause-held"
	// IdleStop stops the sandbox (its disk kept, its memory not);
	// requests do not start it.
	IdleStop = "stop"
)

// IdleOp is the lifecycle operation idle action applies.
func IdleOp(action string) Op {
	switch action {
	case IdleHibernate:
		return OpHibernate
	case IdleStop:
		return OpStop
	}
	return OpPause
}

// IdleWakes reports whether a request wakes a sandbox that idle action
// put to rest (an empty action is the default, a pause).
func IdleWakes(action string) bool {
	return action != IdlePauseHeld && action != IdleStop
}

// MinIdleTimeout is the shortest idle timeout.
const MinIdleTimeout = time.Second

// ParseIdle checks an idle timeout (a Go duration; empty: none) and its
// action ("pause", the default, "hibernate", "pause-held" or "stop").
func ParseIdle(timeout, action string) (time.Duration, string, error) {
	if timeout == "" {
		if action != "" {
			return 0, "", invalid("idle_action %q without idle_timeout", clip(action))
		}
		return 0, "", nil
	}
	d, err := time.ParseDuration(timeout)
	if err != nil {
		return 0, "", invalid("idle_timeout %q: not a duration like \"10m\"", clip(timeout))
	}
	if d < MinIdleTimeout || d > MaxTimeout {
		return 0, "", invalid("idle_timeout %s: must be between %s and %s", d, MinIdleTimeout, MaxTimeout)
	}
	switch action {
	case "":
		action = IdlePause
	case IdlePause, IdleHibernate, IdlePauseHeld, IdleStop:
	default:
		return 0, "", invalid("idle_action %q: want pause, hibernate, pause-held or stop", clip(action))
	}
	return d, action, nil
}

// MaxProjectLen bounds a project name.
const MaxProjectLen = 128

// ValidateProject checks a project name: empty (none), or 1 to
// MaxProjectLen bytes of [A-Za-z0-9._-], the shape credential scopes accept.
func ValidateProject(p string) error {
	if len(p) > MaxProjectLen {
		return invalid("project %q: at most %d characters", clip(p), MaxProjectLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalid("project %q: use letters, digits, '.', '_' and '-'", clip(p))
		}
	}
	return nil
}
