package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// errRefreshRoute refuses a request whose capability names another
// incarnation of the sandbox: the control plane should refresh its route.
// It is errdefs.ErrRefreshRoute, answered 409 refresh_route (internal/apierr).
var errRefreshRoute = fmt.Errorf("%w: refresh route", errdefs.ErrRefreshRoute)

// keysFile keeps the verification keys across restarts of the node.
func (m *Manager) keysFile() string { return filepath.Join(m.cfg.DataDir, "node", "keys.json") }

// SetKeys installs the control plane's verification keys unless the node
// already holds a newer set, and persists them.
func (m *Manager) SetKeys(ks *capability.KeySet) error {
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	if m.keys != nil && m.keys.Version > ks.Version {
		return nil
	}
	if m.keys != nil && m.keys.Version == ks.Version && len(m.keys.Keys) == len(ks.Keys) {
		same := true
		for id, k := range ks.Keys {
			if !k.Equal(m.keys.Keys[id]) {
				same = false
			}
		}
		if same {
			return nil
		}
	}
	b, err := json.Marshal(ks)
	if err != nil {
		return err
	}
	tmp := m.keysFile() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("node: keep verification keys: %w", err)
	}
	if err := os.Rename(tmp, m.keysFile()); err != nil {
		return fmt.Errorf("node: keep verification keys: %w", err)
	}
	m.keys = ks
	go m.pushKeysToBridges(ks)
	return nil
}

// currentKeys returns the verification keys the node holds, or nil.
func (m *Manager) currentKeys() *capability.KeySet {
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	return m.keys
}

// pushKeysToBridges hands a new key set to every execution's host bridge
// (they admit requests with it). A bridge that does not take it refuses
// requests signed with the new keys until the next push; it is logged.
func (m *Manager) pushKeysToBridges(ks *capability.KeySet) {
	recs, _ := m.records.all()
	for _, rec := range recs {
		bc, err := m.bridge(rec)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := bc.pushKeys(ctx, ks); err != nil {
			m.log.Warn("push verification keys to a host bridge", "exec", rec.ExecID, "err", err)
		}
		cancel()
	}
}

// loadKeys reads the keys kept by an earlier run, if any.
func (m *Manager) loadKeys() {
	b, err := os.ReadFile(m.keysFile())
	if err != nil {
		return
	}
	var ks capability.KeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		m.log.Warn("ignoring unreadable verification keys", "file", m.keysFile(), "err", err)
		return
	}
	m.keys = &ks
}

// checkCapability verifies the request's capability and compares it with the
// execution this node has installed for rec. It never asks anyone else.
func (m *Manager) checkCapability(header string, rec *Record, op capability.Op, now time.Time) error {
	return m.checkCapabilityFor(header, rec, capability.Request{Op: op}, now)
}

// checkCapabilityFor is checkCapability for a full request: ServicePort
// traffic names its port and protocol. now is this node's clock (m.now in
// production): the capability's window is judged by it. Nothing is accepted
// while the node's clocks, read then, do not agree with the control plane's
// (clock.go).
func (m *Manager) checkCapabilityFor(header string, rec *Record, req capability.Request, now time.Time) error {
	m.keysMu.Lock()
	keys := m.keys
	m.keysMu.Unlock()
	if keys == nil {
		m.capabilityRefused(rec, nil, refusedNoKeys, "no verification keys yet")
		return fmt.Errorf("%w: the node has no verification keys yet; retry shortly", errdefs.ErrUnavailable)
	}
	if header == "" {
		m.capabilityRefused(rec, nil, refusedMissing, "capability required")
		return fmt.Errorf("%w: capability required", errdefs.ErrPermissionDenied)
	}
	m.clock.waitFirst(firstMeasureWait)
	if v := m.clockVerdict(); !v.agreed {
		// Every capability, whatever it says: this node cannot tell
		// whether it is inside its window.
		m.capabilityRefused(rec, nil, refusedClock, "node clock does not agree with the control plane's")
		return v.err()
	}
	token, err := capability.Decode(header)
	if err == nil {
		var c *capability.Capability
		if c, err = m.verifier.Verify(token, keys, now); err == nil {
			installed := capability.Identity{
				Sandbox: rec.SandboxID, Generation: rec.Generation, Node: m.cfg.NodeID,
				Substrate: rec.Runtime, Activation: rec.ActivationID,
			}
			switch d, why := capability.Compare(c, installed, req); d {
			case capability.Allow:
				if rec.Retired {
					// The capability names this execution, which no
					// longer serves the sandbox: a newer one does.
					m.capabilityRefused(rec, c, refusedRefreshRoute, "execution retired")
					return fmt.Errorf("%w: execution generation %d was retired (generation %d serves the sandbox)", errRefreshRoute, rec.Generation, rec.RetiredBy)
				}
				return nil
			case capability.RefreshRoute:
				m.capabilityRefused(rec, c, refusedRefreshRoute, why)
				return fmt.Errorf("%w: %s", errRefreshRoute, why)
			default:
				m.capabilityRefused(rec, c, denyReason(c, installed, req), why)
				return fmt.Errorf("%w: %s", errdefs.ErrPermissionDenied, why)
			}
		}
	}
	m.capabilityRefused(rec, nil, verifyRefusal(err), err.Error())
	return fmt.Errorf("%w: %v", errdefs.ErrPermissionDenied, err)
}
