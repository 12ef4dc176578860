package e2bapi

// The request fields of pause, resume and snapshot that are not plain
// timeouts, each read (or refused by name), never dropped: docs/e2b-api.md
// lists every field of every call.

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// e2bSnapshotKindFor is the kind of snapshot POST /sandboxes/{id}/snapshots
// takes of sb for E2B's memory field (the SDK's mode: "full" is true,
// "filesystem" false, nil the server's default): false is a disk snapshot,
// from which a create cold-boots; true a full one, which only a vm
// sandbox can take; nil a full one on vm and a disk one on ns.
func e2bSnapshotKindFor(sb *sandbox.Sandbox, memory *bool) (store.SnapshotKind, error) {
	switch {
	case memory == nil:
		return e2bSnapshotKind(sb), nil
	case !*memory:
		return store.SnapshotDisk, nil
	case sb.Runtime != "vm":
		return "", fmt.Errorf("%w: snapshot memory true (mode \"full\"): sandbox %s runs on the %s runtime, whose snapshots hold its filesystem only; "+
			"take it with mode \"filesystem\" (memory false), or use a sandbox on the vm runtime", errdefs.ErrInvalidArgument, sb.ID, sb.Runtime)
	}
	return store.SnapshotFull, nil
}

// guestProbeTimeout bounds pause's requireHealthyGuest check.
const guestProbeTimeout = 5 * time.Second

// e2bGuestAnswers is pause's requireHealthyGuest check: sb's guest agent
// reads a file for it within guestProbeTimeout, or the pause is refused
// with 503 (Unavailable) as E2B refuses it, the sandbox left running.
func (a *API) e2bGuestAnswers(ctx context.Context, sb *sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(ctx, guestProbeTimeout)
	defer cancel()
	if _, err := a.host.ReadGuestFile(ctx, sb, "/proc/uptime", "root", 64); err != nil {
		return fmt.Errorf("%w: pause with requireHealthyGuest: the guest agent of sandbox %s does not answer (%v); it is left running; retry, or pause without requireHealthyGuest",
			errdefs.ErrUnavailable, sb.ID, err)
	}
	return nil
}

// e2bResumeAutoPause checks the autoPause of the deprecated POST
// /sandboxes/{id}/resume against sb: what a sandbox does at its timeout
// is set at its create (lifecycle.onTimeout), so a resume may repeat it but
// not change it.
func e2bResumeAutoPause(sb *sandbox.Sandbox, autoPause *bool) error {
	if autoPause == nil || *autoPause == e2bPausesOnTimeout(sb) {
		return nil
	}
	now := "killed"
	if e2bPausesOnTimeout(sb) {
		now = "paused"
	}
	return fmt.Errorf("%w: resume autoPause %t: sandbox %s is %s at its timeout, as its create said (lifecycle.onTimeout), and SPACE cannot change that on resume; "+
		"leave autoPause out, or create a sandbox with the lifecycle you want", errdefs.ErrInvalidArgument, *autoPause, sb.ID, now)
}
