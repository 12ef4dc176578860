// Package imagecfg is a template's image defaults: the user, environment,
// working directory and start command that every sandbox made from the
// template gets, kept inside the template's tree at Path as a JSON object
// with the field names of the OCI image spec's "config" object
// (https://github.com/opencontainers/image-spec/blob/main/config.md).
//
// Writers are the template builders (OCI and docker-archive import, the
// Dockerfile builder); the reader is the guest daemon, for which the file is
// the sandbox's own and so hostile: Parse bounds the size and every count,
// and refuses any value that could not be applied as written.
//
// The package uses the standard library only: the guest daemon imports it.
package imagecfg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Path is where a template's tree keeps its image defaults (mode 0644,
// owned by root).
const Path = "/etc/space/image-config.json"

// Limits Parse enforces.
const (
	// MaxSize is the largest file Parse and Read accept.
	MaxSize = 64 << 10
	// MaxEnv is the most Env entries.
	MaxEnv = 1024
	// MaxArgs is the most Entrypoint and Cmd entries together.
	MaxArgs = 1024
	// MaxPorts is the most ExposedPorts.
	MaxPorts = 256
	// MaxLabels is the most Labels.
	MaxLabels = 256
	// maxUser bounds the user field (name[:group]).
	maxUser = 256
	// MaxReadyCmd is the longest SpaceReadyCmd, in bytes.
	MaxReadyCmd = 4096
	// MaxReadyTimeout is the largest SpaceReadyTimeout, in seconds.
	// MaxReadyTimeout keeps the wait inside the control plane's bounds on a
	// start (a resume waits 2 minutes, a create 5).
	MaxReadyTimeout = 90
	// DefaultReadyTimeout is the wait, in seconds, for a SpaceReadyCmd
	// when SpaceReadyTimeout is 0.
	DefaultReadyTimeout = 60
)

// ErrInvalid is wrapped by every error Parse returns for bytes that are not
// a valid image config.
var ErrInvalid = errors.New("invalid image config")

// Config is a template's image defaults. Field names and JSON names are the
// OCI image config's; absent fields are omitted when marshalled.
type Config struct {
	// User runs commands that name no user: name, uid, name:group or
	// uid:gid.
	User string `json:"User,omitempty"`
	// Env holds K=V entries, applied under a request's own environment.
	Env []string `json:"Env,omitempty"`
	// WorkingDir is the directory of commands that name none: absolute and
	// clean.
	WorkingDir string `json:"WorkingDir,omitempty"`
	// Entrypoint and Cmd, concatenated, are the start command (exec form:
	// no shell).
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	// ExposedPorts keys are "N", "N/tcp" or "N/udp"; values are empty
	// objects, as in OCI.
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	// Labels are free-form metadata.
	Labels map[string]string `json:"Labels,omitempty"`
	// SpaceReadyCmd, a SPACE extension (E2B's readyCmd), is a shell
	// command (/bin/sh -c) that says the start command is ready: every
	// sandbox runs it after starting the start command until it exits 0,
	// for at most SpaceReadyTimeout seconds, before its first request.
	SpaceReadyCmd string `json:"SpaceReadyCmd,omitempty"`
	// SpaceReadyTimeout bounds the SpaceReadyCmd wait, in seconds: 0 is
	// DefaultReadyTimeout, at most MaxReadyTimeout.
	SpaceReadyTimeout int `json:"SpaceReadyTimeout,omitempty"`
}

// ReadyWait is how long a sandbox waits for SpaceReadyCmd to exit 0.
func (c Config) ReadyWait() time.Duration {
	if c.SpaceReadyTimeout > 0 {
		return time.Duration(c.SpaceReadyTimeout) * time.Second
	}
	return DefaultReadyTimeout * time.Second
}

// StartCommand is Entrypoint followed by Cmd: the argv of the template's
// start command, empty when there is none.
func (c Config) StartCommand() []string {
	if len(c.Entrypoint)+len(c.Cmd) == 0 {
		return nil
	}
	argv := make([]string, 0, len(c.Entrypoint)+len(c.Cmd))
	return append(append(argv, c.Entrypoint...), c.Cmd...)
}

// ReadyPort is the TCP port the start command is ready once it listens on:
// the only TCP port of ExposedPorts, 0 when there are none or several.
func (c Config) ReadyPort() int {
	port := 0
	for k := range c.ExposedPorts {
		n, proto, err := parsePort(k)
		if err != nil || proto != "tcp" {
			continue
		}
		if port != 0 {
			return 0
		}
		port = n
	}
	return port
}

// Parse decodes and validates an image config. Field names match exactly
// (as OCI's do; encoding/json alone would also take "user"); unknown fields
// are ignored, as OCI asks, and null is the same as absent.
func Parse(b []byte) (Config, error) {
	var c Config
	if len(b) > MaxSize {
		return c, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(b), MaxSize)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return c, fmt.Errorf("%w: not a JSON object: %v", ErrInvalid, err)
	}
	if fields == nil {
		return c, fmt.Errorf("%w: null, not a JSON object", ErrInvalid)
	}
	for _, f := range []struct {
		name string
		dst  any
	}{
		{"User", &c.User}, {"Env", &c.Env}, {"WorkingDir", &c.WorkingDir},
		{"Entrypoint", &c.Entrypoint}, {"Cmd", &c.Cmd},
		{"ExposedPorts", &c.ExposedPorts}, {"Labels", &c.Labels},
		{"SpaceReadyCmd", &c.SpaceReadyCmd}, {"SpaceReadyTimeout", &c.SpaceReadyTimeout},
	} {
		raw, ok := fields[f.name]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return Config{}, fmt.Errorf("%w: field %s: %v", ErrInvalid, f.name, err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks every field against the rules Parse applies.
func (c Config) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	if c.User != "" {
		if err := checkUser(c.User); err != nil {
			return bad("User", "%q: %v (want name, uid, name:group or uid:gid)", c.User, err)
		}
	}
	if len(c.Env) > MaxEnv {
		return bad("Env", "%d entries, more than %d", len(c.Env), MaxEnv)
	}
	for i, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return bad("Env", "entry %d %.64q is not K=V", i, kv)
		}
		if !validEnvName(k) {
			return bad("Env", "entry %d: name %.64q is not a variable name (letters, digits, _; not starting with a digit)", i, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("Env", "entry %d (%s): value holds a NUL byte", i, k)
		}
	}
	if c.WorkingDir != "" {
		if !path.IsAbs(c.WorkingDir) || path.Clean(c.WorkingDir) != c.WorkingDir || strings.IndexByte(c.WorkingDir, 0) >= 0 {
			return bad("WorkingDir", "%.128q is not an absolute, clean path (like /app)", c.WorkingDir)
		}
	}
	if n := len(c.Entrypoint) + len(c.Cmd); n > MaxArgs {
		return bad("Entrypoint and Cmd", "%d arguments, more than %d", n, MaxArgs)
	}
	for field, args := range map[string][]string{"Entrypoint": c.Entrypoint, "Cmd": c.Cmd} {
		for i, a := range args {
			if strings.IndexByte(a, 0) >= 0 {
				return bad(field, "argument %d holds a NUL byte", i)
			}
		}
	}
	if argv := c.StartCommand(); len(argv) > 0 && argv[0] == "" {
		return bad("Entrypoint and Cmd", "the program (first argument) is empty")
	}
	if len(c.ExposedPorts) > MaxPorts {
		return bad("ExposedPorts", "%d ports, more than %d", len(c.ExposedPorts), MaxPorts)
	}
	for k := range c.ExposedPorts {
		if _, _, err := parsePort(k); err != nil {
			return bad("ExposedPorts", "%.32q: %v", k, err)
		}
	}
	if len(c.Labels) > MaxLabels {
		return bad("Labels", "%d labels, more than %d", len(c.Labels), MaxLabels)
	}
	for k, v := range c.Labels {
		if k == "" || strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			return bad("Labels", "label %.64q: empty name or a NUL byte", k)
		}
	}
	if len(c.SpaceReadyCmd) > MaxReadyCmd {
		return bad("SpaceReadyCmd", "%d bytes, more than %d", len(c.SpaceReadyCmd), MaxReadyCmd)
	}
	if strings.IndexByte(c.SpaceReadyCmd, 0) >= 0 {
		return bad("SpaceReadyCmd", "holds a NUL byte")
	}
	if c.SpaceReadyTimeout < 0 || c.SpaceReadyTimeout > MaxReadyTimeout {
		return bad("SpaceReadyTimeout", "%d seconds, want 0 (the default, %d) to %d", c.SpaceReadyTimeout, DefaultReadyTimeout, MaxReadyTimeout)
	}
	if c.SpaceReadyTimeout != 0 && c.SpaceReadyCmd == "" {
		return bad("SpaceReadyTimeout", "set without a SpaceReadyCmd to bound")
	}
	return nil
}

// Marshal validates c and encodes it as Parse reads it back.
func Marshal(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("image config: encode: %w", err)
	}
	b = append(b, '\n')
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: encodes to %d bytes, more than %d", ErrInvalid, len(b), MaxSize)
	}
	return b, nil
}

// Write stores c at Path inside the template tree root, mode 0644, owned by
// root when the caller is root. Every path step is resolved inside root
// (os.Root): a symlink in the tree cannot send the write outside it, and a
// symlink at Path itself is replaced, not followed.
func Write(root string, c Config) error {
	b, err := Marshal(c)
	if err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("image config: open the tree %s: %w", root, err)
	}
	defer r.Close()
	rel := strings.TrimPrefix(Path, "/")
	dir := path.Dir(rel)
	if err := r.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("image config: %s: make %s: %w", root, dir, err)
	}
	tmp := path.Join(dir, ".image-config.json.tmp")
	_ = r.Remove(tmp)
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("image config: %s: create %s: %w", root, tmp, err)
	}
	err = writeAll(f, b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		_ = r.Remove(tmp)
		return fmt.Errorf("image config: %s: write %s: %w", root, rel, err)
	}
	return nil
}

func writeAll(f *os.File, b []byte) error {
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := f.Chown(0, 0); err != nil {
			return err
		}
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Sync()
}

// Read reads and parses Path inside the tree root ("/" in the guest),
// resolving every step inside root. The file must be a regular file of at
// most MaxSize bytes; a FIFO or device is refused without blocking on it. A
// tree without the file gives an error wrapping fs.ErrNotExist.
func Read(root string) (Config, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return Config{}, fmt.Errorf("image config: open the tree %s: %w", root, err)
	}
	defer r.Close()
	rel := strings.TrimPrefix(Path, "/")
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return Config{}, fmt.Errorf("image config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Config{}, fmt.Errorf("image config: %s: %w", Path, err)
	}
	if !fi.Mode().IsRegular() {
		return Config{}, fmt.Errorf("%w: %s is not a regular file (%v)", ErrInvalid, Path, fi.Mode().Type())
	}
	if fi.Size() > MaxSize {
		return Config{}, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, Path, fi.Size(), MaxSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("image config: read %s: %w", Path, err)
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", Path, err)
	}
	return c, nil
}

// UserGroup splits User into its user and group parts ("" when absent).
func (c Config) UserGroup() (user, group string) {
	user, group, _ = strings.Cut(c.User, ":")
	return user, group
}

func checkUser(s string) error {
	if len(s) > maxUser {
		return fmt.Errorf("longer than %d bytes", maxUser)
	}
	u, g, hasGroup := strings.Cut(s, ":")
	if err := checkAccount(u); err != nil {
		return fmt.Errorf("user: %w", err)
	}
	if hasGroup {
		if err := checkAccount(g); err != nil {
			return fmt.Errorf("group: %w", err)
		}
	}
	return nil
}

// checkAccount accepts a numeric id (below 2^32-1, which means "no id") or
// a name as useradd takes it: letters, digits, '_', '-', '.', an optional
// trailing '$', not starting with '-' or a digit-only string.
func checkAccount(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if isDigits(s) {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil || n == 1<<32-1 {
			return fmt.Errorf("id %s out of range", s)
		}
		return nil
	}
	if len(s) > 32 {
		return errors.New("a name longer than 32 bytes")
	}
	if s[0] == '-' || s[0] == '.' {
		return errors.New("a name starting with '-' or '.'")
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '-', ch == '.':
		case ch == '$' && i == len(s)-1:
		default:
			return fmt.Errorf("a name with the character %q", ch)
		}
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func validEnvName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		ch := k[i]
		if !(ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			return false
		}
	}
	return true
}

// parsePort reads an ExposedPorts key: "N", "N/tcp" or "N/udp" with N in
// 1..65535 (no protocol means tcp, as in OCI).
func parsePort(k string) (int, string, error) {
	num, proto, hasProto := strings.Cut(k, "/")
	if !hasProto {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" {
		return 0, "", fmt.Errorf("protocol %q, want tcp or udp", proto)
	}
	if !isDigits(num) || len(num) > 5 {
		return 0, "", errors.New("not a port number")
	}
	n, _ := strconv.Atoi(num)
	if n < 1 || n > 65535 {
		return 0, "", fmt.Errorf("port %d out of 1..65535", n)
	}
	return n, proto, nil
}
