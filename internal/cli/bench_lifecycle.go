package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/benchstat"
)

// benchMaxHeavy bounds the rounds of the operations that move a whole
// sandbox (hibernate and restore, fork, rollback): each costs seconds on a
// VM under emulation.
const benchMaxHeavy = 3

// lifecycleHeavy times what moves a whole sandbox: full snapshots (vm
// only: the ns runtime has no memory to save), hibernate and restore on the
// same node, fork (each child deleted untimed), and rollback to disk
// snapshot snap. Every row is min(count, benchMaxHeavy) rounds (full
// snapshots: min(count, benchMaxSnapshots)).
func (b *bench) lifecycleHeavy(ctx context.Context, id, snap string) ([]benchstat.Scenario, error) {
	var rows []benchstat.Scenario
	add := func(name string, t timer) { rows = append(rows, benchstat.Scenario{Name: name, Summary: t.summary(0)}) }
	sb, err := b.e.c.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	rounds := min(b.count, benchMaxHeavy)
	if sb.Runtime == "vm" {
		full := b.newTimer()
		var snaps []string
		var errs []error
		for i := range min(b.count, benchMaxSnapshots) {
			err := full.time(func() error {
				s, err := b.snapshotOf(ctx, id, sandboxv1.SnapshotFull)
				if s != "" {
					snaps = append(snaps, s)
				}
				return err
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("full snapshot %d: %w", i+1, err))
				break
			}
		}
		for _, s := range snaps {
			if err := b.e.c.DeleteSnapshot(context.WithoutCancel(ctx), id, s); err != nil {
				errs = append(errs, fmt.Errorf("clean up: %w", err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		add("snapshot_full", full)
	}
	hib, restore := b.newTimer(), b.newTimer()
	for i := range rounds {
		if err := hib.time(func() error { return b.toState(ctx, id, "hibernate", sandboxv1.StateHibernated) }); err != nil {
			return nil, fmt.Errorf("hibernate %d of %d: %w", i+1, rounds, err)
		}
		if err := restore.time(func() error { return b.toState(ctx, id, "restore", sandboxv1.StateRunning) }); err != nil {
			return nil, fmt.Errorf("restore %d of %d: %w", i+1, rounds, err)
		}
	}
	add("hibernate", hib)
	add("restore", restore)
	other, why, err := b.restoreOtherNode(ctx, id, rounds)
	switch {
	case err != nil:
		return nil, err
	case why != "":
		b.report.Note("restore_other_node", why)
	default:
		add("restore_other_node", other)
	}

	fork := b.newTimer()
	for i := range rounds {
		var child string
		err := fork.time(func() error {
			c, err := b.fork(ctx, id)
			child = c
			return err
		})
		if child != "" {
			if derr := b.deleteNow(ctx, child); derr != nil && err == nil {
				err = derr
			}
		}
		if err != nil {
			return nil, fmt.Errorf("fork %d of %d: %w", i+1, rounds, err)
		}
	}
	add("fork", fork)

	rollback := b.newTimer()
	for i := range rounds {
		if err := rollback.time(func() error { return b.rollback(ctx, id, snap) }); err != nil {
			return nil, fmt.Errorf("rollback %d of %d: %w", i+1, rounds, err)
		}
	}
	add("rollback", rollback)
	return rows, nil
}

// restoreOtherNode times rounds restores of id on a node other than the one
// it runs on (each after an untimed hibernate), alternating between live
// nodes that offer its runtime. It needs an admin key (to list nodes and
// choose one) and two such nodes; otherwise why says what is missing and
// nothing is timed.
func (b *bench) restoreOtherNode(ctx context.Context, id string, rounds int) (t timer, why string, err error) {
	t = b.newTimer()
	nodes, err := b.e.c.ListNodes(ctx)
	if err != nil {
		return t, "not measured: listing the nodes needs an admin key (" + err.Error() + ")", nil
	}
	sb, err := b.e.c.GetSandbox(ctx, id)
	if err != nil {
		return t, "", err
	}
	var live []string
	for _, n := range nodes {
		if n.Live && slices.Contains(n.Runtimes, sb.Runtime) {
			live = append(live, n.ID)
		}
	}
	if len(live) < 2 {
		return t, fmt.Sprintf("not measured: %d live node(s) offer %s; it takes two", len(live), sb.Runtime), nil
	}
	for i := range rounds {
		cur, err := b.e.c.GetSandbox(ctx, id)
		if err != nil {
			return t, "", err
		}
		target := live[0]
		if target == cur.Node {
			target = live[1]
		}
		if err := b.toState(ctx, id, "hibernate", sandboxv1.StateHibernated); err != nil {
			return t, "", fmt.Errorf("restore on another node: hibernate %d of %d: %w", i+1, rounds, err)
		}
		err = t.time(func() error {
			rctx, cancel := context.WithTimeout(ctx, defaultWait)
			defer cancel()
			got, err := b.e.c.RestoreSandboxOn(rctx, id, target)
			if err == nil && got.State != sandboxv1.StateRunning {
				got, err = b.e.c.WaitForState(rctx, id, sandboxv1.StateRunning)
			}
			if err == nil && got.Node != target {
				err = fmt.Errorf("restored on %s, asked for %s", got.Node, target)
			}
			return err
		})
		if err != nil {
			return t, "", fmt.Errorf("restore %d of %d on node %s: %w", i+1, rounds, target, err)
		}
	}
	return t, "", nil
}

// fork forks id and waits until the child runs; it returns the child's id
// whenever the server assigned one, so it can be deleted.
func (b *bench) fork(ctx context.Context, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	child, err := b.e.c.ForkSandbox(ctx, id, sandboxv1.ForkRequest{Name: b.nextName()})
	if err != nil {
		b.mu.Lock()
		b.unknown++ // the fork may exist: cleanup finds it by name
		b.mu.Unlock()
		return "", err
	}
	b.remember(child.ID)
	if child.State != sandboxv1.StateRunning {
		if _, err := b.e.c.WaitForState(ctx, child.ID, sandboxv1.StateRunning); err != nil {
			return child.ID, err
		}
	}
	return child.ID, nil
}

// rollback rolls id back to snap and waits until it runs again.
func (b *bench) rollback(ctx context.Context, id, snap string) error {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	sb, err := b.e.c.RollbackSandbox(ctx, id, snap)
	if err != nil {
		return err
	}
	if sb.State != sandboxv1.StateRunning {
		_, err = b.e.c.WaitForState(ctx, id, sandboxv1.StateRunning)
	}
	return err
}

// deleteNow deletes a sandbox the run made and waits until it is gone.
func (b *bench) deleteNow(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultWait)
	defer cancel()
	if err := b.e.c.DeleteSandbox(ctx, id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	if err := b.e.c.WaitDeleted(ctx, id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	b.forget(id)
	return nil
}
