package server

// Each node has a credential of its own, which its gateway presents to
// resolve the credentials it injects (ControlPlaneService.ResolveCredential,
// api/node/v1). The join token only enrols: a heartbeat carrying it is
// answered with the node's credential (HeartbeatReply.node_credential),
// and the resolve call refuses the
// join token. The credential is HMAC-SHA256, under the server's MAC key
// (e2bTokenKey: derived from DATA/ca-seal.key, so every replica sharing
// the data directory's keys derives the same one and it survives
// restarts), of a label and the node id. It names one node: the id in the
// request is checked against the credential, so a node cannot present
// itself as another, and the execution asked for must be placed on the
// node the credential names. Nothing is stored: the database never holds
// a usable node credential.

// nodeCredentialLabel separates node credentials from every other MAC
// under the same key. Node ids are [a-z0-9-], so no label-and-id pair
// reads as another.
const nodeCredentialLabel = "space node credential v1\x00"

// nodeCredential is node id's credential.
func (s *Server) nodeCredential(id string) string { return s.e2bMAC(nodeCredentialLabel, id) }
