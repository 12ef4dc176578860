package server

import (
	"context"
	"encoding/json"
	"fmt"
)

// egressNodes pushes egress policies to the nodes' executions
// (service.EgressPusher).
type egressNodes struct{ n *Nodes }

func (e egressNodes) SetEgress(ctx context.Context, node, exec string, policy json.RawMessage) error {
	c, err := e.n.Client(node)
	if err != nil {
		return err
	}
	if err := c.SetEgress(ctx, exec, policy); err != nil {
		return fmt.Errorf("node %s: execution %s: %w", node, exec, err)
	}
	return nil
}
