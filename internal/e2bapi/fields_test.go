package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// TestE2BSnapshotKindFor: the snapshot's memory field (the SDK's mode) is
// read: false is a disk snapshot on either runtime, true a full one on vm
// and a 400 naming it on ns, absent the runtime's default.
func TestE2BSnapshotKindFor(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		runtime string
		memory  *bool
		want    store.SnapshotKind
	}{
		{"vm", nil, store.SnapshotFull},
		{"ns", nil, store.SnapshotDisk},
		{"vm", &no, store.SnapshotDisk},
		{"ns", &no, store.SnapshotDisk},
		{"vm", &yes, store.SnapshotFull},
		{"ns", &yes, ""},
	} {
		got, err := e2bSnapshotKindFor(&sandbox.Sandbox{ID: "sb-1", Runtime: tt.runtime}, tt.memory)
		if tt.want == "" {
			if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "snapshot memory true") {
				t.Errorf("%s memory %v: %q, %v; want a 400 naming snapshot memory", tt.runtime, fmtBool(tt.memory), got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s memory %v: %q, %v; want %q", tt.runtime, fmtBool(tt.memory), got, err, tt.want)
		}
	}
}

func fmtBool(b *bool) any {
	if b == nil {
		return "absent"
	}
	return *b
}

// guestHost is a Host whose guest agent answers ReadGuestFile with err.
type guestHost struct {
	statusHost
	err   error
	calls int
}

func (h *guestHost) ReadGuestFile(ctx context.Context, sb *sandbox.Sandbox, path, user string, limit int64) ([]byte, error) {
	h.calls++
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("the probe has no deadline")
	}
	return []byte("1.0 1.0\n"), h.err
}

// TestE2BGuestAnswers: pause's requireHealthyGuest is a probe of the guest
// agent; one that does not answer refuses the pause with 503 naming it.
func TestE2BGuestAnswers(t *testing.T) {
	sb := &sandbox.Sandbox{ID: "sb-1", Runtime: "ns"}
	h := &guestHost{}
	a := &API{host: h, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := a.e2bGuestAnswers(context.Background(), sb); err != nil || h.calls != 1 {
		t.Fatalf("healthy guest: %v after %d probes; want nil after 1", err, h.calls)
	}
	h.err = context.DeadlineExceeded
	err := a.e2bGuestAnswers(context.Background(), sb)
	if err == nil || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "requireHealthyGuest") {
		t.Fatalf("unresponsive guest: %v; want Unavailable naming requireHealthyGuest", err)
	}
	if st := h.Status(err); st != 503 {
		t.Errorf("unresponsive guest answers %d, want 503 (E2B's refusal)", st)
	}
}

// TestE2BResumeAutoPause: resume's autoPause may repeat what the sandbox
// does at its timeout, never change it.
func TestE2BResumeAutoPause(t *testing.T) {
	yes, no := true, false
	kills := &sandbox.Sandbox{ID: "sb-k", ExpiresAt: time.Now().Add(time.Minute)}
	pauses := &sandbox.Sandbox{ID: "sb-p", IdleTimeout: time.Minute}
	for _, tt := range []struct {
		sb        *sandbox.Sandbox
		autoPause *bool
		ok        bool
	}{
		{kills, nil, true}, {kills, &no, true}, {kills, &yes, false},
		{pauses, nil, true}, {pauses, &yes, true}, {pauses, &no, false},
	} {
		err := e2bResumeAutoPause(tt.sb, tt.autoPause)
		if tt.ok != (err == nil) || (err != nil && (!errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "resume autoPause"))) {
			t.Errorf("%s autoPause %v: %v; want ok=%t (else a 400 naming resume autoPause)", tt.sb.ID, fmtBool(tt.autoPause), err, tt.ok)
		}
	}
}

// TestE2BUpdateNetworkRefused: every updateNetwork field SPACE cannot do
// is refused by name; empty ones ask for nothing.
func TestE2BUpdateNetworkRefused(t *testing.T) {
	for _, tt := range []struct{ body, refused string }{
		{`{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}`, ""},
		{`{"dnsServers":null,"rules":{},"egressProxy":null}`, ""},
		{`{"egressProxy":{"address":"socks5://p:1080"}}`, "network.egressProxy"},
		{`{"dnsServers":["1.1.1.1"]}`, "network.dnsServers"},
	} {
		var req e2bEgressRequest
		if err := json.Unmarshal([]byte(tt.body), &req); err != nil {
			t.Fatal(err)
		}
		err := req.refused()
		if tt.refused == "" {
			if err != nil {
				t.Errorf("%s: %v; want accepted", tt.body, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.refused) {
			t.Errorf("%s: %v; want a 400 naming %s", tt.body, err, tt.refused)
		}
	}
}

// FuzzE2BUpdateNetworkBody: any updateNetwork body is accepted or refused
// with a 400 (InvalidArgument), never a panic; one whose
// egressProxy or dnsServers asks for something is always refused (rules
// are read: FuzzParseE2BRules).
func FuzzE2BUpdateNetworkBody(f *testing.F) {
	for _, s := range []string{`{}`, `{"dnsServers":["1.1.1.1"]}`, `{"dnsServers":[]}`, `{"rules":{"a.com":[{}]}}`,
		`{"egressProxy":{"address":"x"}}`, `{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}`, `{"allow_internet_access":false,"dnsServers":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req e2bEgressRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		err := req.refused()
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%s: %v, not InvalidArgument", body, err)
		}
		for _, v := range []json.RawMessage{req.EgressProxy, req.DNSServers} {
			if len(v) > 0 && !isJSONEmpty(v) && err == nil {
				t.Fatalf("%s: accepted, though %s asks for something", body, v)
			}
		}
		if err == nil {
			if _, perr := e2bEgressPolicy(req.AllowOut, req.DenyOut, req.AllowInternetAccess); perr != nil && !errors.Is(perr, errdefs.ErrInvalidArgument) {
				t.Fatalf("%s: policy %v, not InvalidArgument", body, perr)
			}
		}
	})
}
