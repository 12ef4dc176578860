package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSigningKeyRotation rotates the capability signing key while requests
// flow: the new key is published to the node first and signs only after the
// activation delay, so not one request is refused; afterwards the new key
// signs and the old one is retired (it keeps verifying until its
// capabilities expire).
func TestSigningKeyRotation(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	before := signingKeys(t, in)
	newID, e, c := in.cli("", "signing-key", "rotate")
	newID = strings.TrimSpace(newID)
	if c != 0 || newID == "" {
		t.Fatalf("signing-key rotate: %d %q %s", c, newID, e)
	}
	deadline := time.Now().Add(capabilityActivationDelay + 2*time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		if res := in.exec(sb.ID, "echo", "ok"); res.Stdout != "ok\n" {
			t.Fatalf("request %d during the rotation: %+v", n, res)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := signingKeys(t, in)
	if after.Version <= before.Version {
		t.Errorf("key set version %d after rotation, was %d", after.Version, before.Version)
	}
	var signing, retired string
	for _, k := range after.Keys {
		if k.Signing {
			signing = k.ID
		}
		if k.RetiredAt != nil {
			retired = k.ID
		}
	}
	if signing != newID || retired == "" || retired == newID {
		t.Errorf("after the activation delay: signing %q, retired %q; want %s signing and the old key retired\n%+v", signing, retired, newID, after)
	}
	if res := in.exec(sb.ID, "echo", "still"); res.Stdout != "still\n" {
		t.Errorf("after the rotation: %+v", res)
	}
}

type signingKeyList struct {
	Version uint64 `json:"version"`
	Keys    []struct {
		ID        string     `json:"id"`
		Signing   bool       `json:"signing"`
		RetiredAt *time.Time `json:"retired_at"`
	} `json:"keys"`
}

func signingKeys(t *testing.T, in *instance) signingKeyList {
	t.Helper()
	out, e, c := in.cli("", "signing-key", "list", "-o", "json")
	if c != 0 {
		t.Fatalf("signing-key list: %d %s", c, e)
	}
	var l signingKeyList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("signing-key list: %v %q", err, out)
	}
	return l
}

// capabilityActivationDelay mirrors capability.ActivationDelay (the e2e
// tests drive binaries, not packages).
const capabilityActivationDelay = 10 * time.Second
