package bridge

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Admission: the bridge is a receiver of its own. Every public guest request
// carries the capability the control plane minted (the node checked it and
// passes it on); the bridge verifies it with the key set the node pushes and
// compares it with the execution identity installed by Init, and refuses
// before anything reaches the guest. A node that forwarded a request meant
// for another execution — by a bug or because it was compromised — cannot
// reach this guest with it. The capability never reaches the guest.

// admission is the bridge's verification state.
type admission struct {
	mu   sync.Mutex
	keys *capability.KeySet
	// verifier verifies each token's signature once per key set
	// (capability.Verifier); the rest of the check runs every time.
	verifier  capability.Verifier
	installed *capability.Identity
	retired   bool
	// clock is the node's last clock verdict and clockAt when it came
	// (this bridge's clock, wall and monotonic); nil: none yet.
	clock       *ClockRequest
	clockAtWall time.Time
	clockAtMono time.Duration
	now         func() time.Time
	// clocks reads the wall and monotonic clocks for the jump check;
	// nil: the real ones (tests set it).
	clocks func() (time.Time, time.Duration)
	// refusals counts refused requests by reason.
	refusals map[string]uint64
}

// KeysRequest is the body of POST /bridge/v1/keys.
type KeysRequest struct {
	Keys *capability.KeySet `json:"keys"`
}

func (a *admission) setKeys(ks *capability.KeySet) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys == nil || ks.Version >= a.keys.Version {
		a.keys = ks
	}
}

// ClockRequest is the body of POST /bridge/v1/clock: the node's verdict on
// its clock against the control plane's (internal/node/clock.go). The bridge
// admits nothing before the first verdict or while it disagrees, and watches
// its own wall clock against its monotonic clock in between: a wall clock
// set by more than what the verdict leaves of capability.Skew refuses too.
type ClockRequest struct {
	// Agreed is the node's verdict.
	Agreed bool `json:"agreed"`
	// OffsetMS is the control plane's clock minus the node's, BoundMS the
	// measure's error, both in milliseconds.
	OffsetMS int64 `json:"offset_ms"`
	BoundMS  int64 `json:"bound_ms"`
	// Reason is the node's refusal text while it disagrees.
	Reason string `json:"reason,omitempty"`
}

// bridgeOrigin is the origin of the monotonic readings.
var bridgeOrigin = time.Now()

func (a *admission) readClocks() (time.Time, time.Duration) {
	if a.clocks != nil {
		return a.clocks()
	}
	t := time.Now()
	return t.Round(0), t.Sub(bridgeOrigin)
}

func (a *admission) setClock(v ClockRequest) {
	wall, mono := a.readClocks()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clock, a.clockAtWall, a.clockAtMono = &v, wall, mono
}

// clockErr is the refusal while the node's clock verdict, moved by any jump
// of this bridge's wall clock since (wall minus monotonic time elapsed since
// the verdict came), does not agree; nil when it does.
func clockErr(v *ClockRequest, drift time.Duration) error {
	if v == nil {
		return errors.New("the node has not told the host bridge whether its clock agrees with the control plane's yet; capabilities refused until it has")
	}
	if !v.Agreed {
		if v.Reason != "" {
			return errors.New(v.Reason)
		}
		return errors.New("node clock differs from the control plane's; capabilities refused until it agrees")
	}
	offset := time.Duration(v.OffsetMS)*time.Millisecond - drift
	if offset < 0 {
		offset = -offset
	}
	if offset+time.Duration(v.BoundMS)*time.Millisecond > capability.Skew {
		return fmt.Errorf("the host's wall clock was set by %s since the node measured it; capabilities refused until the node measures it again", drift.Round(time.Second))
	}
	return nil
}

func (a *admission) install(id capability.Identity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.installed = &id
	a.retired = false
}

// identity is the installed execution identity, nil before Init.
func (a *admission) identity() *capability.Identity {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.installed
}

func (a *admission) retire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.retired = true
}

// errRefresh marks a refusal the caller may repair by refreshing its route.
var errRefresh = errors.New("refresh route")

// clockRefusal marks a refusal because the node's clock does not agree with
// the control plane's.
type clockRefusal struct{ error }

func (c clockRefusal) Unwrap() error { return c.error }

// refusalClass is what a refusal is answered as, through the node's column
// of the table (internal/apierr) as the node answers the same refusals:
// errdefs.ErrRefreshRoute (409 refresh_route), errdefs.ErrClockSkew (503
// clock_disagrees), else permission denied (403). The refusal's own text is
// kept for the message.
func refusalClass(err error) error {
	switch {
	case errors.Is(err, errRefresh):
		return errdefs.ErrRefreshRoute
	case errors.As(err, new(clockRefusal)):
		return errdefs.ErrClockSkew
	}
	return errdefs.ErrPermissionDenied
}

// Refusal reasons the bridge counts (GET /bridge/v1/metrics).
const (
	RefusedNoKeys       = "no_keys"
	RefusedMissing      = "missing"
	RefusedMalformed    = "malformed"
	RefusedVerify       = "signature_or_expiry"
	RefusedRefreshRoute = "refresh_route"
	RefusedDeny         = "deny"
	RefusedClock        = "clock" // the node's clock does not agree with the control plane's
	RefusedNotYetValid  = "not_yet_valid"
	// RefusedTooManyStreams counts requests over Config.MaxStreams.
	RefusedTooManyStreams = "too_many_streams"
)

// refusal is a check's refusal: why, the reason counted, and the
// capability's identity when it verified.
type refusal struct {
	err    error
	reason string
	got    *capability.Identity
}

// check admits a request for op carrying header; nil admits it.
func (a *admission) check(header string, op capability.Op) *refusal {
	a.mu.Lock()
	keys, installed, retired, clock := a.keys, a.installed, a.retired, a.clock
	atWall, atMono := a.clockAtWall, a.clockAtMono
	a.mu.Unlock()
	if keys == nil || installed == nil {
		return &refusal{errors.New("the bridge has no verification keys or identity yet"), RefusedNoKeys, nil}
	}
	if header == "" {
		return &refusal{errors.New("capability required"), RefusedMissing, nil}
	}
	wall, mono := a.readClocks()
	if err := clockErr(clock, wall.Sub(atWall)-(mono-atMono)); err != nil {
		return &refusal{clockRefusal{err}, RefusedClock, nil}
	}
	tok, err := capability.Decode(header)
	if err != nil {
		return &refusal{err, RefusedMalformed, nil}
	}
	c, err := a.verifier.Verify(tok, keys, a.now())
	if errors.Is(err, capability.ErrNotYetValid) {
		return &refusal{err, RefusedNotYetValid, nil}
	}
	if err != nil {
		return &refusal{err, RefusedVerify, nil}
	}
	switch d, why := capability.Compare(c, *installed, capability.Request{Op: op}); d {
	case capability.Allow:
		if retired {
			return &refusal{fmt.Errorf("%w: this execution was retired", errRefresh), RefusedRefreshRoute, &c.Identity}
		}
		return nil
	case capability.RefreshRoute:
		return &refusal{fmt.Errorf("%w: %s", errRefresh, why), RefusedRefreshRoute, &c.Identity}
	default:
		return &refusal{errors.New(why), RefusedDeny, &c.Identity}
	}
}

// count records a refusal.
func (a *admission) count(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refusals == nil {
		a.refusals = map[string]uint64{}
	}
	a.refusals[reason]++
}

// Refusals returns the refusal counts by reason.
func (a *admission) Refusals() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.refusals)
}

// GuestOp is the operation a public guest path needs; the node and the
// bridge admit requests by it. /health and /envs: either operation reads them.
func GuestOp(path string) capability.Op {
	switch {
	case strings.HasPrefix(path, "/process.Process/"):
		return capability.OpExec
	case path == "/files" || strings.HasPrefix(path, "/filesystem.Filesystem/"):
		return capability.OpFiles
	}
	return capability.OpExec
}

// admit checks a public guest request and answers the refusal; it reports
// whether the request may go on (with the capability header removed).
func (b *Bridge) admit(w http.ResponseWriter, r *http.Request) bool {
	ref := b.adm.check(r.Header.Get(capability.Header), GuestOp(r.URL.Path))
	r.Header.Del(capability.Header)
	if ref == nil {
		return true
	}
	err := ref.err
	b.adm.count(ref.reason)
	b.adm.mu.Lock()
	installed := b.adm.installed
	b.adm.mu.Unlock()
	b.log.Warn("request refused by the host bridge", "path", r.URL.Path, "reason", ref.reason, "err", err,
		"installed", identityString(installed), "capability", identityString(ref.got))
	status, code, reason := apierr.Encode(apierr.Node, refusalClass(err))
	writeJSON(w, status, nodev1.Error{Code: code, Message: "host bridge: " + err.Error(), Reason: string(reason)})
	return false
}

func (b *Bridge) handleKeys(w http.ResponseWriter, r *http.Request) {
	var req KeysRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.Keys == nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("keys: bad body: %v", err))
		return
	}
	b.adm.setKeys(req.Keys)
	w.WriteHeader(http.StatusNoContent)
}

func (b *Bridge) handleClock(w http.ResponseWriter, r *http.Request) {
	var req ClockRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<12)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("clock: bad body: %v", err))
		return
	}
	b.adm.setClock(req)
	w.WriteHeader(http.StatusNoContent)
}

func (b *Bridge) handleRetire(w http.ResponseWriter, r *http.Request) {
	b.adm.retire()
	w.WriteHeader(http.StatusNoContent)
}

func identityString(id *capability.Identity) string {
	if id == nil {
		return "none"
	}
	return fmt.Sprintf("%s/g%d@%s/%s/%s", id.Sandbox, id.Generation, id.Node, id.Substrate, id.Activation)
}

// Metrics is the body of GET /bridge/v1/metrics: what this execution's
// bridge counted, for the node to add up.
type Metrics struct {
	// Refusals counts the requests the bridge refused, by reason.
	Refusals map[string]uint64 `json:"refusals"`
	// GuestProtocolErrors counts the guest's protocol errors on its
	// channel, by kind (guest.ProtocolErrors).
	GuestProtocolErrors map[string]uint64 `json:"guest_protocol_errors,omitempty"`
}

// handleMetrics serves GET /bridge/v1/metrics.
func (b *Bridge) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Metrics{Refusals: b.adm.Refusals(), GuestProtocolErrors: b.client.ProtocolErrors()})
}
