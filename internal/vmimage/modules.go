package vmimage

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// GuestModules are the kernel modules the guest loads from the initramfs:
// virtio over PCI, the virtio-serial console that carries the guest channel,
// the root disk, fw_cfg (the host's per-VM configuration), the virtio RNG and
// virtio-net (the sandbox's network interface, when it has one; loaded
// always, it finds no device otherwise). Their dependencies (virtio_net's
// net_failover and failover) are added by ResolveModules. ext4 is built into
// Debian's cloud kernel; a name that is built in is skipped.
var GuestModules = []string{
	"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
	"virtio_console", "virtio_blk", "qemu_fw_cfg", "virtio_rng", "failover", "net_failover", "virtio_net", "ext4",
}

// Module is one kernel module to load.
type Module struct {
	// Name is the module's name with '-' written as '_'.
	Name string
	// Path is the host path of the .ko file.
	Path string
}

// moduleName normalises a module or file name the way the kernel does.
func moduleName(s string) string {
	return strings.ReplaceAll(strings.TrimSuffix(s, ".ko"), "-", "_")
}

// ResolveModules returns names and everything they depend on, each once, in
// an order where every module comes after its dependencies. modulesDir is a
// kernel's /lib/modules/<version> tree; dependencies come from each .ko's
// .modinfo section (the package ships no modules.dep: depmod writes it at
// install time). Names listed in modules.builtin are skipped.
func ResolveModules(modulesDir string, names []string) ([]Module, error) {
	index := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modulesDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			index[moduleName(filepath.Base(p))] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules of %s: %w", modulesDir, err)
	}
	builtin, err := builtinModules(modulesDir)
	if err != nil {
		return nil, err
	}
	r := resolver{index: index, builtin: builtin, state: map[string]int{}}
	for _, n := range names {
		if err := r.visit(moduleName(n), nil); err != nil {
			return nil, err
		}
	}
	return r.order, nil
}

// builtinModules reads modules.builtin (paths like kernel/fs/ext4/ext4.ko).
func builtinModules(modulesDir string) (map[string]bool, error) {
	b, err := readFileLimit(filepath.Join(modulesDir, "modules.builtin"), 4<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out[moduleName(filepath.Base(line))] = true
		}
	}
	return out, nil
}

type resolver struct {
	index   map[string]string
	builtin map[string]bool
	// state is 1 while a module's dependencies are visited, 2 once ordered.
	state map[string]int
	order []Module
}

func (r *resolver) visit(name string, chain []string) error {
	switch r.state[name] {
	case 2:
		return nil
	case 1:
		return fmt.Errorf("kernel modules: dependency cycle %s -> %s", strings.Join(chain, " -> "), name)
	}
	if r.builtin[name] {
		r.state[name] = 2
		return nil
	}
	p, ok := r.index[name]
	if !ok {
		return fmt.Errorf("kernel module %s (needed by %v): not in the kernel package", name, chain)
	}
	r.state[name] = 1
	deps, err := moduleDeps(p)
	if err != nil {
		return err
	}
	for _, dep := range deps {
		if err := r.visit(dep, append(chain, name)); err != nil {
			return err
		}
	}
	r.state[name] = 2
	r.order = append(r.order, Module{Name: name, Path: p})
	return nil
}

// moduleDeps reads the depends= entry of a module's .modinfo section.
func moduleDeps(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("kernel module %s: no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("kernel module %s: read .modinfo: %w", path, err)
	}
	return ParseModinfoDepends(data), nil
}

// ParseModinfoDepends returns the module names of the depends= entry of a
// .modinfo section (NUL-separated key=value strings), normalised, without
// empties or duplicates.
func ParseModinfoDepends(modinfo []byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, kv := range bytes.Split(modinfo, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		for _, d := range strings.Split(string(v), ",") {
			d = moduleName(strings.TrimSpace(d))
			if d != "" && !seen[d] && validModuleName(d) {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

func validModuleName(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
