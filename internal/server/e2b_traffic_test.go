package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/ingress"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// e2bSandbox records a running sandbox with the E2B rule for every HTTP
// port, as the E2B API's create leaves it.
func (p *portPlane) e2bSandbox(public bool) *sandbox.Sandbox {
	p.t.Helper()
	sb := p.sandbox(sandbox.StateRunning)
	if err := p.st.PutServicePort(p.t.Context(), store.ServicePort{Sandbox: sb.ID, Port: e2bapi.AnyPort, Protocol: "http", Public: public, CreatedAt: time.Now().UTC()}); err != nil {
		p.t.Fatal(err)
	}
	return sb
}

// wantTrafficRefused checks E2B's 403 for a missing or wrong traffic token.
func wantTrafficRefused(t *testing.T, what string, a answer, id string) {
	t.Helper()
	var e e2bapi.ProxyError
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.status != http.StatusForbidden || e.Code != http.StatusForbidden ||
		e.SandboxID != id || e.Message == "" || a.header.Get("X-Guest") != "" {
		t.Errorf("%s: HTTP %d %s, want E2B's 403 {message, sandboxId: %s, code: 403} from the control plane", what, a.status, a.body, id)
	}
}

func TestE2BTrafficPorts(t *testing.T) {
	p := newPortPlane(t)
	_, apiPort, _ := net.SplitHostPort(p.addr)
	public := p.e2bSandbox(true)
	private := p.e2bSandbox(false)
	spaceMade := p.sandbox(sandbox.StateRunning)
	tokPriv := p.srv.e2bAPI.TrafficToken(private.ID)
	hostOf := func(sb *sandbox.Sandbox, port int) string {
		return fmt.Sprintf("%d-%s.localhost:%s", port, sb.ID, apiPort)
	}
	byHeader := func(sb *sandbox.Sandbox, port int, extra map[string]string) map[string]string {
		h := map[string]string{e2bapi.SandboxHeader: sb.ID, e2bapi.PortHeader: fmt.Sprint(port)}
		for k, v := range extra {
			h[k] = v
		}
		return h
	}
	calls := func() int64 { return p.node.calls.Load() }

	t.Run("public by default: any HTTP port, no credentials", func(t *testing.T) {
		e := guestSaw(t, p.send(http.MethodGet, p.url+"/index.html?a=1", "", "", byHeader(public, 8000, nil)))
		if e.Path != "/index.html" || e.Query != "a=1" || e.Header.Get(e2bapi.SandboxHeader) != "" || e.Header.Get(e2bapi.PortHeader) != "" {
			t.Errorf("header routing: guest saw %+v; want the path as sent and no routing headers", e)
		}
		p.wantCapability(public, 8000, "http")
		guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(public, 3000), "", nil))
		p.wantCapability(public, 3000, "http")
		guestSaw(t, p.send(http.MethodGet, p.url+"/v1/sandboxes/"+public.ID+"/ports/5173/proxy/", "", "", nil))
		p.wantCapability(public, 5173, "http")
	})

	t.Run("private: the sandbox's traffic token, or the tenant's key", func(t *testing.T) {
		if tokPriv == p.srv.e2bAPI.AccessToken(private.ID) || tokPriv == p.srv.e2bAPI.TrafficToken(public.ID) {
			t.Fatal("the traffic token equals the envd token or another sandbox's")
		}
		before := calls()
		wantTrafficRefused(t, "no token, by header", p.send(http.MethodGet, p.url+"/", "", "", byHeader(private, 8000, nil)), private.ID)
		wantTrafficRefused(t, "no token, by host", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", nil), private.ID)
		wantTrafficRefused(t, "wrong token", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", map[string]string{e2bapi.TrafficHeader: strings.Repeat("ab", 32)}), private.ID)
		wantTrafficRefused(t, "token prefix", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", map[string]string{e2bapi.TrafficHeader: tokPriv[:32]}), private.ID)
		wantTrafficRefused(t, "the envd token", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", map[string]string{e2bapi.TrafficHeader: p.srv.e2bAPI.AccessToken(private.ID)}), private.ID)
		other := p.e2bSandbox(false)
		wantTrafficRefused(t, "another sandbox's token", p.send(http.MethodGet, p.url+"/", "", "", byHeader(private, 8000, map[string]string{e2bapi.TrafficHeader: p.srv.e2bAPI.TrafficToken(other.ID)})), private.ID)
		wantTrafficRefused(t, "a SPACE port token", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", map[string]string{sandboxv1.PortTokenHeader: "spt_x"}), private.ID)
		if n := calls() - before; n != 0 {
			t.Errorf("the node saw %d refused requests", n)
		}

		e := guestSaw(t, p.send(http.MethodPost, p.url+"/submit", "", "body", byHeader(private, 8000, map[string]string{e2bapi.TrafficHeader: tokPriv, "X-App": "kept"})))
		if e.Header.Get(e2bapi.TrafficHeader) != "" || e.Header.Get("X-App") != "kept" || e.Body != "body" {
			t.Errorf("the guest saw %+v; want the application's headers and body, without e2b-traffic-access-token", e)
		}
		p.wantCapability(private, 8000, "http")
		// The lower-case spelling E2B's SDKs and docs use is the same header.
		e = guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(private, 8001), "", map[string]string{"e2b-traffic-access-token": tokPriv}))
		if strings.Contains(fmt.Sprint(e.Header), tokPriv) {
			t.Errorf("the guest saw the traffic token in %v", e.Header)
		}
		e = guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(private, 8002), "", map[string]string{"Authorization": "Bearer " + p.key}))
		if e.Header.Get("Authorization") != "" {
			t.Errorf("the guest saw the API key: %v", e.Header)
		}
		wantError(t, "another tenant's key", p.send(http.MethodGet, p.url+"/", hostOf(private, 8000), "", map[string]string{"Authorization": "Bearer " + p.other}), 404, sandboxv1.CodeNotFound)
	})

	t.Run("a wrong token is refused before any lookup", func(t *testing.T) {
		for name, id := range map[string]string{"unknown sandbox": sandbox.NewID(), "public sandbox": public.ID, "SPACE sandbox": spaceMade.ID} {
			a := p.send(http.MethodGet, p.url+"/", "", "", map[string]string{e2bapi.SandboxHeader: id, e2bapi.PortHeader: "8000", e2bapi.TrafficHeader: tokPriv})
			wantTrafficRefused(t, name, a, id)
		}
	})

	t.Run("an exposed port keeps its own rules", func(t *testing.T) {
		p.expose(private.ID, 3000, "http", true)
		guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(private, 3000), "", nil))
		sp := p.expose(private.ID, 3001, "http", false)
		wantError(t, "the E2B token on a private exposed port", p.send(http.MethodGet, p.url+"/", hostOf(private, 3001), "", map[string]string{e2bapi.TrafficHeader: tokPriv}), 401, sandboxv1.CodeUnauthenticated)
		guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(private, 3001), "", map[string]string{sandboxv1.PortTokenHeader: sp.Token}))
		p.expose(public.ID, 4000, "http", false)
		wantError(t, "a private port of a public E2B sandbox", p.send(http.MethodGet, p.url+"/", hostOf(public, 4000), "", nil), 401, sandboxv1.CodeUnauthenticated)
		p.expose(public.ID, 4001, "tcp", true)
		wantError(t, "a tcp port over HTTP", p.send(http.MethodGet, p.url+"/", hostOf(public, 4001), "", nil), 400, sandboxv1.CodeInvalidArgument)
	})

	t.Run("a SPACE sandbox's ports stay closed", func(t *testing.T) {
		before := calls()
		wantError(t, "by host", p.send(http.MethodGet, p.url+"/", hostOf(spaceMade, 8000), "", nil), 404, sandboxv1.CodeNotFound)
		wantError(t, "by E2B headers", p.send(http.MethodGet, p.url+"/", "", "", byHeader(spaceMade, 8000, nil)), 404, sandboxv1.CodeNotFound)
		wantError(t, "with its own traffic token", p.send(http.MethodGet, p.url+"/", hostOf(spaceMade, 8000), "", map[string]string{e2bapi.TrafficHeader: p.srv.e2bAPI.TrafficToken(spaceMade.ID)}), 404, sandboxv1.CodeNotFound)
		wantError(t, "with the API key", p.send(http.MethodGet, p.url+"/", hostOf(spaceMade, 8000), "", map[string]string{"Authorization": "Bearer " + p.key}), 404, sandboxv1.CodeNotFound)
		if n := calls() - before; n != 0 {
			t.Errorf("the node saw %d refused requests", n)
		}
	})

	t.Run("no TCP through the E2B rule", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "GET /v1/sandboxes/%s/ports/8000/tcp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n", public.ID)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusNotFound {
			t.Errorf("tunnel to an unexposed port of a public E2B sandbox: %v %v, want 404", resp, err)
		}
	})

	t.Run("envd keeps its own token", func(t *testing.T) {
		// Port 49983 is never the any-port rule: the traffic token does not
		// open envd, the envd token does (TestE2BEnvdProxy covers the rest).
		a := p.send(http.MethodGet, p.url+"/health", "", "", byHeader(private, e2bapi.EnvdPort, map[string]string{e2bapi.TrafficHeader: tokPriv}))
		if a.status != http.StatusUnauthorized {
			t.Errorf("envd with the traffic token only: HTTP %d %s, want 401", a.status, a.body)
		}
	})
}

// TestE2BTrafficSPACEAPI: SPACE's port API neither makes nor removes the
// E2B rule, and lists it as port 0 with "{port}" in its URLs.
func TestE2BTrafficSPACEAPI(t *testing.T) {
	p := newPortPlane(t)
	sb := p.e2bSandbox(false)
	auth := map[string]string{"Authorization": "Bearer " + p.key}
	for _, body := range []string{`{"port":0}`, `{"port":0,"protocol":"http","public":true}`, `{"port":-1}`} {
		wantError(t, "expose "+body, p.send(http.MethodPost, p.url+"/v1/sandboxes/"+sb.ID+"/ports", "", body, auth), 400, sandboxv1.CodeInvalidArgument)
	}
	wantError(t, "unexpose port 0", p.send(http.MethodDelete, p.url+"/v1/sandboxes/"+sb.ID+"/ports/0", "", "", auth), 400, sandboxv1.CodeInvalidArgument)
	a := p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports", "", "", auth)
	var list sandboxv1.ServicePortList
	if err := json.Unmarshal([]byte(a.body), &list); err != nil || a.status != 200 || len(list.Ports) != 1 {
		t.Fatalf("list: HTTP %d %s", a.status, a.body)
	}
	_, apiPort, _ := net.SplitHostPort(p.addr)
	got := list.Ports[0]
	if want := fmt.Sprintf("http://{port}-%s.localhost:%s/", sb.ID, apiPort); got.Port != 0 || got.Protocol != "http" || got.Public || got.URL != want || got.Token != "" {
		t.Errorf("listed %+v, want port 0, http, private, URL %s, no token", got, want)
	}
	sp, err := p.st.GetServicePort(t.Context(), sb.ID, e2bapi.AnyPort)
	if err != nil || sp.Public || sp.TokenHash != "" {
		t.Errorf("stored rule %+v, %v: the token is derived, never stored", sp, err)
	}
}

// TestE2BTrafficConnect: connect answers the trafficAccessToken of a
// sandbox with private ports, and null otherwise.
func TestE2BTrafficConnect(t *testing.T) {
	p := newPortPlane(t)
	for _, tc := range []struct {
		name string
		sb   *sandbox.Sandbox
		want string
	}{
		{"private", p.e2bSandbox(false), "token"},
		{"public", p.e2bSandbox(true), ""},
		{"made through SPACE's API", p.sandbox(sandbox.StateRunning), ""},
	} {
		a := p.send(http.MethodPost, p.url+E2BPathPrefix+"/sandboxes/"+tc.sb.ID+"/connect", "", `{"timeout":60}`, map[string]string{"X-API-Key": p.key})
		var got map[string]any
		if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != http.StatusOK {
			t.Fatalf("%s: connect: HTTP %d %s", tc.name, a.status, a.body)
		}
		tok, present := got["trafficAccessToken"]
		switch {
		case !present:
			t.Errorf("%s: no trafficAccessToken in %s", tc.name, a.body)
		case tc.want == "" && tok != nil:
			t.Errorf("%s: trafficAccessToken %v, want null", tc.name, tok)
		case tc.want != "" && tok != p.srv.e2bAPI.TrafficToken(tc.sb.ID):
			t.Errorf("%s: trafficAccessToken %v, want the sandbox's", tc.name, tok)
		}
		a = p.send(http.MethodGet, p.url+E2BPathPrefix+"/sandboxes/"+tc.sb.ID, "", "", map[string]string{"X-API-Key": p.key})
		var detail e2bapi.SandboxDetail
		if err := json.Unmarshal([]byte(a.body), &detail); err != nil || a.status != http.StatusOK {
			t.Fatalf("%s: get: HTTP %d %s", tc.name, a.status, a.body)
		}
		if strings.Contains(a.body, "trafficAccessToken") {
			t.Errorf("%s: the detail carries the traffic token: %s", tc.name, a.body)
		}
		switch wantNet := tc.name != "made through SPACE's API"; {
		case !wantNet && detail.Network != nil:
			t.Errorf("%s: network %+v, want none", tc.name, detail.Network)
		case wantNet && (detail.Network == nil || detail.Network.AllowPublicTraffic != (tc.want == "")):
			t.Errorf("%s: network %+v, want allowPublicTraffic %v", tc.name, detail.Network, tc.want == "")
		}
	}
}

// TestTrafficHeaderAgrees: the ingress checks the traffic token in the
// header the E2B surface hands it out for (each spells E2B's header, as
// neither imports the other).
func TestTrafficHeaderAgrees(t *testing.T) {
	if ingress.TrafficHeader != e2bapi.TrafficHeader {
		t.Errorf("ingress.TrafficHeader %q, e2bapi.TrafficHeader %q: keep them equal", ingress.TrafficHeader, e2bapi.TrafficHeader)
	}
}

// TestE2BMaskRequestHost: with E2B's maskRequestHost the sandbox's port
// sees that Host, ${PORT} replaced by the port, and the client's Host in
// X-Forwarded-Host; a port exposed through SPACE's API keeps the client's.
func TestE2BMaskRequestHost(t *testing.T) {
	p := newPortPlane(t)
	_, apiPort, _ := net.SplitHostPort(p.addr)
	sb := p.sandbox(sandbox.StateRunning)
	if err := p.st.PutServicePort(p.t.Context(), store.ServicePort{Sandbox: sb.ID, Port: e2bapi.AnyPort, Protocol: "http", Public: true,
		HostMask: "${PORT}-app.example.com", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	plain := p.e2bSandbox(true)
	host := fmt.Sprintf("8000-%s.localhost:%s", sb.ID, apiPort)
	e := guestSaw(t, p.send(http.MethodGet, p.url+"/", host, "", nil))
	if e.Host != "8000-app.example.com" || e.Header.Get("X-Forwarded-Host") != host {
		t.Errorf("masked: guest saw Host %q, X-Forwarded-Host %q; want 8000-app.example.com and %q", e.Host, e.Header.Get("X-Forwarded-Host"), host)
	}
	e = guestSaw(t, p.send(http.MethodGet, p.url+"/", "", "", map[string]string{e2bapi.SandboxHeader: sb.ID, e2bapi.PortHeader: "3000"}))
	if e.Host != "3000-app.example.com" {
		t.Errorf("masked, by E2B headers: guest saw Host %q, want 3000-app.example.com", e.Host)
	}
	plainHost := fmt.Sprintf("8000-%s.localhost:%s", plain.ID, apiPort)
	if e = guestSaw(t, p.send(http.MethodGet, p.url+"/", plainHost, "", nil)); e.Host != plainHost {
		t.Errorf("no mask: guest saw Host %q, want the client's %q", e.Host, plainHost)
	}
	p.expose(sb.ID, 4000, "http", true)
	exposed := fmt.Sprintf("4000-%s.localhost:%s", sb.ID, apiPort)
	if e = guestSaw(t, p.send(http.MethodGet, p.url+"/", exposed, "", nil)); e.Host != exposed {
		t.Errorf("an exposed port: guest saw Host %q, want the client's %q", e.Host, exposed)
	}
}
