package node

// The control plane gives each node a credential of its own in its
// heartbeat answers. The node's gateways present it, and not the join
// token, to resolve the credentials they inject: the control plane checks
// that it names this node and that the execution asked for runs here. It
// is held in memory only; a restarted node has it again with its first
// heartbeat answer.

// Credential returns this node's own credential, "" before the control
// plane first answered a heartbeat.
func (m *Manager) Credential() string {
	if c := m.credential.Load(); c != nil {
		return *c
	}
	return ""
}

// setCredential keeps the credential of a heartbeat answer; "" (an older
// control plane) keeps the one held.
func (m *Manager) setCredential(c string) {
	if c != "" && c != m.Credential() {
		m.credential.Store(&c)
	}
}
