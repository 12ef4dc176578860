package drivertest

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/guest"
)

// testIdentity covers the control service's Init and Reseed, and checks that
// two executions do not share their random stream.
func testIdentity(t *testing.T, s *suite) {
	a := s.start(t, options{})
	b := s.start(t, options{})
	t.Run("Init", func(t *testing.T) { testInit(t, a) })
	t.Run("Reseed", func(t *testing.T) { testReseed(t, a) })
	t.Run("DistinctRandom", func(t *testing.T) {
		ra, rb := urandom(t, a), urandom(t, b)
		if ra == rb || strings.Trim(ra, "0") == "" {
			t.Errorf("/dev/urandom: a read %s, b read %s; want different, non-zero bytes", ra, rb)
		}
	})
}

func testInit(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	entropy := make([]byte, 32)
	if _, err := rand.Read(entropy); err != nil {
		t.Fatal(err)
	}
	resp, err := sb.client.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{
		SandboxId: sb.spec.SandboxID, Generation: 1, ActivationId: "act-1",
		EnvVars:     map[string]string{"SPACE_CT_VAR": "from init"},
		DefaultUser: "user", DefaultWorkdir: "/home/user", Entropy: entropy,
	}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if resp.Msg.GetVersion() == "" || resp.Msg.GetReseed() == controlv1.ReseedMethod_RESEED_METHOD_UNSPECIFIED {
		t.Errorf("Init response %v: want a version and how the entropy was mixed in", resp.Msg)
	}
	t.Logf("Init reseeded with %v", resp.Msg.GetReseed())
	res := sb.run(t, "", "/bin/sh", "-c", `echo "$SPACE_CT_VAR|$(id -u)|$(pwd)"`)
	if want := "from init|1000|/home/user\n"; res.stdout.String() != want {
		t.Errorf("a process started after Init: %v, want stdout %q (Init's env, default user and workdir)", res, want)
	}
	if got := sb.envs(t); got["SPACE_CT_VAR"] != "from init" {
		t.Errorf("GET /envs after Init = %v, want SPACE_CT_VAR", got)
	}
	bad := &controlv1.InitRequest{EnvVars: map[string]string{"A=B": "x"}}
	if _, err := sb.client.Control().Init(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Init with an env name holding '=': %v, want InvalidArgument", err)
	}
	if res := sb.run(t, "", "/bin/sh", "-c", `echo "$SPACE_CT_VAR"`); res.stdout.String() != "from init\n" {
		t.Errorf("a rejected Init changed the environment: %v", res)
	}
}

// envs reads GET /envs.
func (sb *sandbox) envs(t *testing.T) map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(callCtx(t), http.MethodGet, guest.BaseURL+"/envs", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := sb.client.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("GET /envs: %v", err)
	}
	defer resp.Body.Close()
	var m map[string]string
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /envs: %s, %v", resp.Status, err)
	}
	return m
}

func testReseed(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		t.Fatal(err)
	}
	resp, err := sb.client.Control().Reseed(ctx, connect.NewRequest(&controlv1.ReseedRequest{Entropy: entropy}))
	if err != nil {
		t.Fatalf("Reseed: %v", err)
	}
	switch m := resp.Msg.GetMethod(); m {
	case controlv1.ReseedMethod_RESEED_METHOD_IOCTL:
	case controlv1.ReseedMethod_RESEED_METHOD_WRITE:
		t.Logf("Reseed fell back to writing /dev/urandom (no CAP_SYS_ADMIN over the RNG): mixed in, not credited")
	default:
		t.Errorf("Reseed method %v, want IOCTL or WRITE", m)
	}
	if _, err := sb.client.Control().Reseed(ctx, connect.NewRequest(&controlv1.ReseedRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Reseed without entropy: %v, want InvalidArgument", err)
	}
}

// urandom reads 32 bytes of /dev/urandom in the sandbox, as hex.
func urandom(t *testing.T, sb *sandbox) string {
	t.Helper()
	out := strings.Join(strings.Fields(sb.sh(t, "head -c 32 /dev/urandom | od -An -tx1")), "")
	if len(out) != 64 {
		t.Fatalf("32 bytes of /dev/urandom as hex: %q", out)
	}
	return out
}
