package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

type servicePort struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	URL      string `json:"url"`
	ProxyURL string `json:"proxy_url"`
	Token    string `json:"token"`
}

// rawGet sends a GET to the API listener with the given Host and headers and
// returns the status and body.
func (in *instance) rawGet(t *testing.T, path, host string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, in.url+path, nil)
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServicePort: a port the sandbox serves is reachable through the
// gateway by Host and by path with the port's token or the API key, a TCP
// port through a space-tcp tunnel; unexposed ports, missing tokens and a
// paused sandbox are refused.
func TestServicePort(t *testing.T) { testServicePort(t, "ns") }

// TestServicePortVM: the same into a microVM (inbound connections over its
// virtio-net link).
func TestServicePortVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	testServicePort(t, "vm")
}

func testServicePort(t *testing.T, runtime string) {
	in := startServer(t, newDataDir(t))
	sb := in.createWithEgress(runtime, map[string]any{"allow_internet": false})
	// httpd daemonizes itself; nc -ll -e is a persistent echo server, in
	// the background, so both outlive the exec that starts them.
	if r := in.sh(sb.ID, "mkdir -p /tmp/www && echo hello-from-sandbox > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && (nc -ll -p 2222 -e cat </dev/null >/dev/null 2>&1 &)"); r.ExitCode != 0 {
		t.Fatalf("start the sandbox's servers: %+v", r)
	}

	var p servicePort
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 8080}, &p); code != http.StatusCreated || p.Token == "" {
		t.Fatalf("expose 8080: HTTP %d %+v", code, p)
	}
	// By path, with the API key.
	path := "/v1/sandboxes/" + sb.ID + "/ports/8080/proxy/index.html"
	var code int
	var body string
	for i := 0; i < 50; i++ { // httpd starts in the background
		if code, body = in.rawGet(t, path, "", map[string]string{"Authorization": "Bearer " + in.key}); code == http.StatusOK {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusOK || strings.TrimSpace(body) != "hello-from-sandbox" {
		t.Fatalf("ingress by path: HTTP %d %q", code, body)
	}
	// By Host, with the port's token.
	host := fmt.Sprintf("8080-%s.localhost", sb.ID)
	if code, body := in.rawGet(t, "/index.html", host, map[string]string{"X-Space-Port-Token": p.Token}); code != http.StatusOK || strings.TrimSpace(body) != "hello-from-sandbox" {
		t.Errorf("ingress by Host: HTTP %d %q", code, body)
	}
	// By headers, for localhost clients without the ingress domain.
	if code, body := in.rawGet(t, "/index.html", "", map[string]string{"X-Space-Sandbox": sb.ID, "X-Space-Port": "8080", "Authorization": "Bearer " + in.key}); code != http.StatusOK || strings.TrimSpace(body) != "hello-from-sandbox" {
		t.Errorf("ingress by headers: HTTP %d %q", code, body)
	}
	for _, c := range []struct {
		name, path, host string
		headers          map[string]string
		want             int
	}{
		{"no token", "/index.html", host, nil, http.StatusUnauthorized},
		{"wrong token", "/index.html", host, map[string]string{"X-Space-Port-Token": "nope"}, http.StatusUnauthorized},
		{"unexposed port", "/index.html", fmt.Sprintf("8081-%s.localhost", sb.ID), map[string]string{"Authorization": "Bearer " + in.key}, http.StatusNotFound},
		{"another sandbox", "/index.html", "8080-zzzzzzzzzzzzzzzzzzzz.localhost", map[string]string{"Authorization": "Bearer " + in.key}, http.StatusNotFound},
	} {
		if code, body := in.rawGet(t, c.path, c.host, c.headers); code != c.want {
			t.Errorf("%s: HTTP %d %q, want %d", c.name, code, body, c.want)
		}
	}

	// TCP through a tunnel.
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/ports", map[string]any{"port": 2222, "protocol": "tcp"}, &p); code != http.StatusCreated {
		t.Fatalf("expose 2222/tcp: HTTP %d", code)
	}
	if code, _ := in.rawGet(t, "/v1/sandboxes/"+sb.ID+"/ports/2222/proxy/", "", map[string]string{"Authorization": "Bearer " + in.key}); code != http.StatusBadRequest {
		t.Errorf("a tcp port over HTTP: HTTP %d, want 400", code)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(in.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /v1/sandboxes/%s/ports/2222/tcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n", sb.ID, in.key)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("tunnel: %v %v", resp, err)
	}
	fmt.Fprint(c, "ping through the tunnel\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "ping through the tunnel\n" {
		t.Fatalf("echo through the tunnel: %q %v", line, err)
	}
	c.Close()

	// A paused sandbox (no idle policy) is not woken by ingress.
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil); code/100 != 2 {
		t.Fatalf("pause: HTTP %d", code)
	}
	if code, body := in.rawGet(t, path, "", map[string]string{"Authorization": "Bearer " + in.key}); code != http.StatusConflict {
		t.Errorf("ingress to a paused sandbox: HTTP %d %q, want 409", code, body)
	}
}
