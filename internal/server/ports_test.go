package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// TestPortsREST: expose, list and unexpose, with tenancy, validation, and
// tokens stored hashed and shown only once.
func TestPortsREST(t *testing.T) {
	p := newPortPlane(t)
	sb := p.sandbox(sandbox.StateRunning)
	base := p.url + "/v1/sandboxes/" + sb.ID + "/ports"
	auth := map[string]string{"Authorization": "Bearer " + p.key}
	other := map[string]string{"Authorization": "Bearer " + p.other}

	priv := p.expose(sb.ID, 3000, "", false)
	p.expose(sb.ID, 22, "tcp", true)
	stored, err := p.st.GetServicePort(t.Context(), sb.ID, 3000)
	if err != nil {
		t.Fatal(err)
	}
	if stored.TokenHash != service.HashPortToken(priv.Token) || strings.Contains(stored.TokenHash, priv.Token) || len(priv.Token) < 40 {
		t.Errorf("stored %+v for token %q: want its SHA-256 only", stored, priv.Token)
	}

	a := p.send(http.MethodGet, base, "", "", auth)
	var list sandboxv1.ServicePortList
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &list) != nil || len(list.Ports) != 2 {
		t.Fatalf("list: HTTP %d %s", a.status, a.body)
	}
	if list.Ports[0].Port != 22 || list.Ports[0].Protocol != "tcp" || !list.Ports[0].Public || list.Ports[1].Port != 3000 || list.Ports[1].Public {
		t.Errorf("list = %+v, want 22/tcp public then 3000/http private", list.Ports)
	}
	if strings.Contains(a.body, priv.Token) || strings.Contains(a.body, `"token"`) {
		t.Errorf("list shows a token: %s", a.body)
	}

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"port 0", `{"port":0}`, 400, sandboxv1.CodeInvalidArgument},
		{"port 65536", `{"port":65536}`, 400, sandboxv1.CodeInvalidArgument},
		{"udp", `{"port":53,"protocol":"udp"}`, 400, sandboxv1.CodeInvalidArgument},
		{"unknown field", `{"port":80,"host":"x"}`, 400, sandboxv1.CodeInvalidArgument},
		{"not JSON", `port=80`, 400, sandboxv1.CodeInvalidArgument},
	} {
		wantError(t, tc.name, p.send(http.MethodPost, base, "", tc.body, auth), tc.status, tc.code)
	}
	wantError(t, "another tenant's expose", p.send(http.MethodPost, base, "", `{"port":80}`, other), 404, sandboxv1.CodeNotFound)
	wantError(t, "another tenant's list", p.send(http.MethodGet, base, "", "", other), 404, sandboxv1.CodeNotFound)
	wantError(t, "another tenant's unexpose", p.send(http.MethodDelete, base+"/3000", "", "", other), 404, sandboxv1.CodeNotFound)
	wantError(t, "no key", p.send(http.MethodGet, base, "", "", nil), 401, sandboxv1.CodeUnauthenticated)
	wantError(t, "unknown sandbox", p.send(http.MethodGet, p.url+"/v1/sandboxes/"+strings.Repeat("z", 20)+"/ports", "", "", auth), 404, sandboxv1.CodeNotFound)
	wantError(t, "bad port to unexpose", p.send(http.MethodDelete, base+"/x", "", "", auth), 400, sandboxv1.CodeInvalidArgument)

	if a := p.send(http.MethodDelete, base+"/3000", "", "", auth); a.status != http.StatusNoContent {
		t.Errorf("unexpose: HTTP %d %s", a.status, a.body)
	}
	wantError(t, "unexpose again", p.send(http.MethodDelete, base+"/3000", "", "", auth), 404, sandboxv1.CodeNotFound)
	// An unexposed port is gone for ingress, token and all.
	wantError(t, "ingress after unexpose", p.send(http.MethodGet, base+"/3000/proxy/", "", "", map[string]string{sandboxv1.PortTokenHeader: priv.Token}), 404, sandboxv1.CodeNotFound)
}
