package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// WarmPool asks every node offering Runtime to keep Size executions of
// Template prepared at one size (CPUs, MemoryMiB), so that creates of that
// shape claim one instead of starting it (node/pool.go).
type WarmPool struct {
	Template  string
	Runtime   string
	CPUs      int
	MemoryMiB int
	Size      int
}

// maxWarmPoolSize bounds one pool per node: prepared executions hold
// memory and serve nobody.
const maxWarmPoolSize = 256

// ParseWarmPool parses the --warm-pool flag's value:
// TEMPLATE:RUNTIME[:CPUSxMEMORY_MIB]=SIZE, e.g. "minimal:ns=8" or
// "base:vm:2x1024=2". Without a size the pool is of the default create
// size (sandbox.DefaultCPUs, sandbox.DefaultMemoryMiB).
func ParseWarmPool(s string) (WarmPool, error) {
	bad := func(why string) (WarmPool, error) {
		return WarmPool{}, fmt.Errorf("%w: warm pool %q: %s (want TEMPLATE:RUNTIME[:CPUSxMEMORY_MIB]=SIZE, e.g. minimal:ns=8 or base:vm:2x1024=2)",
			errdefs.ErrInvalidArgument, s, why)
	}
	spec, size, ok := strings.Cut(s, "=")
	if !ok {
		return bad("no =SIZE")
	}
	n, err := strconv.Atoi(size)
	if err != nil || n < 0 || n > maxWarmPoolSize {
		return bad(fmt.Sprintf("size must be 0..%d", maxWarmPoolSize))
	}
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return bad("want two or three :-separated fields before =")
	}
	p := WarmPool{Template: parts[0], Runtime: parts[1], CPUs: sandbox.DefaultCPUs, MemoryMiB: sandbox.DefaultMemoryMiB, Size: n}
	if err := sandbox.ValidateTemplateName(p.Template); err != nil {
		return bad(err.Error())
	}
	if p.Runtime != "ns" && p.Runtime != "vm" {
		return bad("runtime must be ns or vm")
	}
	if len(parts) == 3 {
		c, m, ok := strings.Cut(parts[2], "x")
		cpus, err1 := strconv.Atoi(c)
		mem, err2 := strconv.Atoi(m)
		if !ok || err1 != nil || err2 != nil {
			return bad("size must be CPUSxMEMORY_MIB, e.g. 2x1024")
		}
		p.CPUs, p.MemoryMiB = cpus, mem
	}
	if p.CPUs < sandbox.MinCPUs || p.CPUs > sandbox.MaxCPUs || p.MemoryMiB < sandbox.MinMemoryMiB || p.MemoryMiB > sandbox.MaxMemoryMiB {
		return bad(fmt.Sprintf("cpus must be %d..%d and memory %d..%d MiB", sandbox.MinCPUs, sandbox.MaxCPUs, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB))
	}
	return p, nil
}

// poolTargets is what node offering runtimes should keep prepared: the
// configured pools of ready templates it can have (not one that exists on
// another node alone: store.Template.Node), each tagged with the template's
// build (a rebuilt template drains what was prepared from the old one).
// A store error yields nil: the node keeps what it has until the next
// heartbeat.
func (s *Server) poolTargets(ctx context.Context, node string, runtimes []string) *[]nodev1.PoolTarget {
	out := []nodev1.PoolTarget{}
	if len(s.cfg.WarmPools) == 0 {
		return &out
	}
	tpls, err := s.store.ListTemplates(ctx)
	if err != nil {
		return nil
	}
	ready := map[string]store.Template{}
	for _, t := range tpls {
		if t.State == store.TemplateReady && (t.Node == "" || t.Node == node) {
			ready[t.Name] = t
		}
	}
	offered := map[string]bool{}
	for _, r := range runtimes {
		offered[r] = true
	}
	for _, p := range s.cfg.WarmPools {
		t, ok := ready[p.Template]
		if !ok || !offered[p.Runtime] || p.Size == 0 {
			continue
		}
		out = append(out, nodev1.PoolTarget{
			PoolKey: nodev1.PoolKey{Template: p.Template, Runtime: p.Runtime, CPUs: p.CPUs, MemoryMiB: p.MemoryMiB},
			Size:    p.Size,
			Version: strconv.FormatInt(t.UpdatedAt.UnixNano(), 10),
		})
	}
	return &out
}

// warmNodes counts, per node, the prepared executions ready for key as
// last reported.
func (n *Nodes) warmNodes(key nodev1.PoolKey) map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for id, obs := range n.observed {
		for _, p := range obs.pools {
			if p.PoolKey == key && p.Ready > 0 {
				out[id] = p.Ready
			}
		}
	}
	return out
}

// Pools returns what each node last reported of its warm pool.
func (n *Nodes) Pools() map[string][]nodev1.PoolStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string][]nodev1.PoolStatus, len(n.observed))
	for id, obs := range n.observed {
		out[id] = obs.pools
	}
	return out
}
