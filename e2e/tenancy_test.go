package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestTenancyRealNode (G-1, G-6) on `space server --dev` with real ns
// sandboxes: another tenant's key is refused with 404 — as for a missing
// sandbox — on the owner's files (read, write, list), the exec WebSocket
// and a private port's ingress, and leaves the file as it was; the E2B data
// plane takes the sandbox's own access token only, not another sandbox's
// nor an API key.
func TestTenancyRealNode(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "sh", "-c", "echo owned > /tmp/owned"); res.ExitCode != 0 {
		t.Fatalf("write the owner's file: %+v", res)
	}
	out, e, c := in.cli("", "tenant", "create", "tenancy-other")
	if c != 0 {
		t.Fatalf("tenant create: %d %s", c, e)
	}
	other := strings.TrimSpace(out)

	send := func(key, method, path, body string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, in.url+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	base := "/v1/sandboxes/" + sb.ID
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	if code, _ := send(in.key, "POST", base+"/ports", `{"port":8080}`, nil); code != http.StatusCreated {
		t.Fatalf("expose 8080: HTTP %d", code)
	}
	for _, tc := range []struct {
		what, method, path, body string
		header                   map[string]string
	}{
		{"read a file", "GET", base + "/files?path=/tmp/owned", "", nil},
		{"write a file", "PUT", base + "/files?path=/tmp/owned", "stolen", nil},
		{"list files", "GET", base + "/files/list?path=/tmp", "", nil},
		{"delete a file", "DELETE", base + "/files?path=/tmp/owned", "", nil},
		{"exec over WebSocket", "GET", base + "/exec", "", upgrade},
		{"watch files over WebSocket", "GET", base + "/files/watch?path=/tmp", "", upgrade},
		{"private port ingress", "GET", base + "/ports/8080/proxy/", "", nil},
	} {
		code, body := send(other, tc.method, tc.path, tc.body, tc.header)
		if code != http.StatusNotFound || strings.Contains(body, "owned") {
			t.Errorf("another tenant: %s: HTTP %d %.200s, want 404", tc.what, code, body)
		}
	}
	if code, body := send(in.key, "GET", base+"/files?path=/tmp/owned", "", nil); code != http.StatusOK || body != "owned\n" {
		t.Errorf("the owner's file after another tenant's tries: HTTP %d %q, want \"owned\\n\"", code, body)
	}
	if code, _ := send(in.key, "GET", base+"/exec", "", upgrade); code != http.StatusSwitchingProtocols {
		t.Errorf("the owner's exec WebSocket: HTTP %d, want 101", code)
	}
	if code, _ := send("", "GET", base+"/ports/8080/proxy/", "", nil); code != http.StatusUnauthorized {
		t.Errorf("private port without a key: HTTP %d, want 401", code)
	}

	// The E2B data plane: the sandbox's own envd access token only.
	theirs := in.createWithKey(other)
	defer in.doKey(other, "DELETE", "/v1/sandboxes/"+theirs, nil, nil)
	token := func(key, id string) string {
		var got struct {
			Token string `json:"envdAccessToken"`
		}
		if code := in.doKey(key, "POST", "/e2b/sandboxes/"+id+"/connect", map[string]any{"timeout": 300}, &got); code >= 300 || got.Token == "" {
			t.Fatalf("E2B connect %s: HTTP %d", id, code)
		}
		return got.Token
	}
	mine, theirToken := token(in.key, sb.ID), token(other, theirs)
	stat := func(tok string) (int, string) {
		h := map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json"}
		if tok != "" {
			h["X-Access-Token"] = tok
		}
		return send("", "POST", "/filesystem.Filesystem/Stat", `{"path":"/tmp/owned"}`, h)
	}
	for what, tok := range map[string]string{"no token": "", "another sandbox's token": theirToken, "an API key": in.key, "a forged token": strings.Repeat("0", len(mine))} {
		if code, body := stat(tok); code != http.StatusUnauthorized {
			t.Errorf("E2B data plane with %s: HTTP %d %.200s, want 401", what, code, body)
		}
	}
	if code, body := stat(mine); code != http.StatusOK || !strings.Contains(body, "owned") {
		t.Errorf("E2B data plane with the sandbox's token: HTTP %d %.200s, want the file's entry", code, body)
	}
}

// createWithKey creates a minimal ns sandbox with key and returns its id.
func (in *instance) createWithKey(key string) string {
	in.t.Helper()
	var sb sandbox
	if code := in.doKey(key, "POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &sb); code != http.StatusCreated {
		in.t.Fatalf("create with another key: HTTP %d %+v", code, sb)
	}
	return sb.ID
}
