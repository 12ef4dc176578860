package capability

// Decision is what a receiver does with a verified capability.
type Decision int

// The decisions.
const (
	// Deny refuses the request: another sandbox, an operation or port the
	// capability does not allow. Retrying cannot help.
	Deny Decision = iota
	// RefreshRoute refuses the request because the capability names another
	// incarnation of this same sandbox: the caller may refresh its route
	// and retry once.
	RefreshRoute
	// Allow lets the request through.
	Allow
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case RefreshRoute:
		return "refresh-route"
	}
	return "deny"
}

// Request is what a receiver is asked to do.
type Request struct {
	Op Op
	// Port and Protocol, for OpServicePort.
	Port     uint16
	Protocol string
}

// Compare decides a request carrying capability c at a receiver that has
// installed the execution identity installed. Bad purposes and port profiles
// are always denied, whatever the identity; an identity of the same sandbox
// that differs in generation, node, substrate, pod or activation is another
// incarnation (RefreshRoute). A receiver that installed generation 8
// therefore refuses generation-7 capabilities however fresh they are.
func Compare(c *Capability, installed Identity, req Request) (Decision, string) {
	switch {
	case c.Sandbox != installed.Sandbox:
		return Deny, "capability is for another sandbox"
	case req.Op == 0 || c.Ops&req.Op != req.Op:
		return Deny, "capability does not allow this operation"
	case req.Op&OpServicePort != 0 && (c.Port != req.Port || c.Protocol != req.Protocol):
		return Deny, "capability is for another port or protocol"
	case c.Generation != installed.Generation:
		return RefreshRoute, "capability is for another generation of the sandbox"
	case c.Node != installed.Node || c.Substrate != installed.Substrate || c.PodUID != installed.PodUID:
		return RefreshRoute, "capability is for the sandbox on another route"
	case c.Activation != installed.Activation:
		return RefreshRoute, "capability is for another activation of the execution"
	}
	return Allow, ""
}
