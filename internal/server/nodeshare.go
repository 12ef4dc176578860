package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/store"
)

// Behind a load balancer a node's heartbeats reach one replica or another,
// and each replica must still be able to call every node. The replica that
// receives a heartbeat therefore stores it (store.NodeReport): the node's
// execution list, which the reconcilers of all replicas judge the node by,
// and the node's API token, sealed with AES-256-GCM under the key all
// replicas share (DATA/ca-seal.key, the key that seals sandboxes' CA keys;
// replicas share the data directory's keys), with the node id as associated
// data so that a sealed token is valid for its node only and never
// mistaken for a sealed CA key. The database never holds a usable token: a
// database dump without the data directory's key opens no node.
//
// A replica that has no client for a node, or whose client was last
// confirmed more than sharedClientTTL ago (the node may have restarted with
// a new token and heartbeated elsewhere), reads the node's address and
// sealed token from the store.

// sharedClientTTL is how long a client is used before the store is asked
// whether the node reported another address or token.
const sharedClientTTL = 5 * time.Second

// nodeTokenSealVersion is the first byte of a sealed node token.
const nodeTokenSealVersion = 1

// SharedNodeStore is what the node registry keeps in the store.
type SharedNodeStore interface {
	GetNode(ctx context.Context, id string) (store.Node, error)
	PutNodeReport(ctx context.Context, r store.NodeReport) error
	GetNodeReport(ctx context.Context, node string) (store.NodeReport, error)
}

type nodeShare struct {
	st     SharedNodeStore
	sealer *CASealer
}

// Share makes the registry store every heartbeat's report in st, its token
// sealed by sealer, and look up in st the nodes this replica has not heard
// from. Call it before the registry is used.
func (n *Nodes) Share(st SharedNodeStore, sealer *CASealer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shared = &nodeShare{st: st, sealer: sealer}
}

func nodeTokenAAD(nodeID string) []byte { return []byte("space node token\x00" + nodeID) }

// sealNodeToken encrypts node nodeID's token: base64 of version, nonce,
// ciphertext and tag.
func (c *CASealer) sealNodeToken(nodeID, token string) string {
	return base64.StdEncoding.EncodeToString(c.s.Seal([]byte{nodeTokenSealVersion}, []byte(token), nodeTokenAAD(nodeID)))
}

// openNodeToken decrypts what sealNodeToken made for the same node.
func (c *CASealer) openNodeToken(nodeID, sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < 1+c.s.Overhead() || b[0] != nodeTokenSealVersion {
		return "", fmt.Errorf("node %s: sealed token: malformed: %w", nodeID, errdefs.ErrFailedPrecondition)
	}
	tok, err := c.s.Open(b[1:], nodeTokenAAD(nodeID))
	if err != nil {
		return "", fmt.Errorf("node %s: sealed token does not open under this replica's key (replicas must share DATA/ca-seal.key): %w", nodeID, errdefs.ErrFailedPrecondition)
	}
	return string(tok), nil
}

// report stores what node id told this replica, for the others.
func (n *Nodes) report(ctx context.Context, id, token string, execs []nodev1.Execution, at time.Time) error {
	n.mu.Lock()
	sh := n.shared
	n.mu.Unlock()
	if sh == nil {
		return nil
	}
	list, err := reconcile.ExecutionsJSON(execs)
	if err != nil {
		return fmt.Errorf("node %s: report: %w", id, err)
	}
	return sh.st.PutNodeReport(ctx, store.NodeReport{
		Node: id, SealedToken: sh.sealer.sealNodeToken(id, token), Executions: list, ReportedAt: at,
	})
}

// fromStore builds node id's client from its stored address and token.
func (n *Nodes) fromStore(sh *nodeShare, id string) (*nodeclient.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	node, err := sh.st.GetNode(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: node %q: %v", errdefs.ErrUnavailable, id, err)
	}
	rep, err := sh.st.GetNodeReport(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: node %q has not reported to any replica: %v", errdefs.ErrUnavailable, id, err)
	}
	if node.LastHeartbeat.Before(n.started) {
		// Nobody has heard it since this replica started: it may be
		// restarting too (one machine running both), and its stored
		// address is not listening yet. Its next heartbeat registers it.
		return nil, fmt.Errorf("%w: node %q has not reported since this control plane started; retry shortly", errdefs.ErrUnavailable, id)
	}
	token, err := sh.sealer.openNodeToken(id, rep.SealedToken)
	if err != nil {
		return nil, err
	}
	if err := n.learn(id, node.Address, token); err != nil {
		return nil, fmt.Errorf("%w: node %q: stored address: %v", errdefs.ErrUnavailable, id, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.clients[id], nil
}
