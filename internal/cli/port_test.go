package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// portServer is a fake API for the port commands. Sandbox sb1 exposes 8080
// (http) and 22 (tcp); its tunnel echoes until the client's half-close,
// then says "|eof".
type portServer struct {
	t       *testing.T
	mu      sync.Mutex // guards exposed and deleted
	exposed []sandboxv1.ExposePortRequest
	deleted []string
}

func (p *portServer) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.ExposePortRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		p.mu.Lock()
		p.exposed = append(p.exposed, req)
		p.mu.Unlock()
		sp := sandboxv1.ServicePort{Port: req.Port, Protocol: req.Protocol, Public: req.Public, URL: "http://8080-sb1.localhost:7070/", CreatedAt: created}
		if !req.Public {
			sp.Token = "spt_secret"
		}
		writeJSONResp(w, 201, sp)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sb1" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
			return
		}
		writeJSONResp(w, 200, sandboxv1.ServicePortList{Ports: []sandboxv1.ServicePort{
			{Port: 22, Protocol: "tcp", URL: "http://127.0.0.1:7070/v1/sandboxes/sb1/ports/22/tcp", CreatedAt: created},
			{Port: 8080, Protocol: "http", Public: true, URL: "http://8080-sb1.localhost:7070/", CreatedAt: created},
		}})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/ports/{port}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.deleted = append(p.deleted, r.PathValue("id")+":"+r.PathValue("port"))
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports/{port}/tcp", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != sandboxv1.TCPUpgrade || r.PathValue("port") != "22" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "not a tunnel")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			p.t.Error(err)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n")
		io.Copy(conn, brw.Reader)
		io.WriteString(conn, "|eof")
	})
	return mux
}

func TestPortExpose(t *testing.T) {
	ps := &portServer{t: t}
	fakeServer(t, ps.mux())
	code, out, errOut := run(t, nil, "port", "expose", "sb1", "8080")
	if code != 0 || out != "http://8080-sb1.localhost:7070/\n" || !strings.Contains(errOut, "token: spt_secret") {
		t.Errorf("private expose: exit %d, stdout %q, stderr %q; want the URL alone on stdout and the token on stderr", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "port", "expose", "--public", "sb1", "8080")
	if code != 0 || out != "http://8080-sb1.localhost:7070/\n" || errOut != "" {
		t.Errorf("public expose: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(t, nil, "port", "expose", "--protocol", "tcp", "-o", "json", "sb1", "22")
	var sp sandboxv1.ServicePort
	if err := json.Unmarshal([]byte(out), &sp); code != 0 || err != nil || sp.Token != "spt_secret" || sp.Protocol != "tcp" {
		t.Errorf("json expose: exit %d, %q (%v)", code, out, err)
	}
	ps.mu.Lock()
	got := append([]sandboxv1.ExposePortRequest(nil), ps.exposed...)
	ps.mu.Unlock()
	want := []sandboxv1.ExposePortRequest{{Port: 8080, Protocol: "http"}, {Port: 8080, Protocol: "http", Public: true}, {Port: 22, Protocol: "tcp"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("server got %+v, want %+v", got, want)
	}
	for _, args := range [][]string{{"sb1"}, {"sb1", "0"}, {"sb1", "65536"}, {"sb1", "x"}, {"--protocol", "udp", "sb1", "80"}} {
		if code, _, _ := run(t, nil, append([]string{"port", "expose"}, args...)...); code != ExitUsage {
			t.Errorf("port expose %v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}

func TestPortListUnexpose(t *testing.T) {
	ps := &portServer{t: t}
	fakeServer(t, ps.mux())
	code, out, errOut := run(t, nil, "port", "list", "sb1")
	if code != 0 || !strings.Contains(out, "PORT") || !strings.Contains(out, "8080  http      public   http://8080-sb1.localhost:7070/") ||
		!strings.Contains(out, "22    tcp       private") {
		t.Errorf("port list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = run(t, nil, "port", "list", "-o", "json", "sb1")
	var list sandboxv1.ServicePortList
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Ports) != 2 {
		t.Errorf("port list -o json: exit %d, %q", code, out)
	}
	if code, _, errOut := run(t, nil, "port", "list", "nosuch"); code != ExitError || !strings.Contains(errOut, "not found") {
		t.Errorf("port list of an unknown sandbox: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := run(t, nil, "port", "unexpose", "sb1", "8080"); code != 0 || out != "" {
		t.Errorf("unexpose: exit %d, %q %q", code, out, errOut)
	}
	ps.mu.Lock()
	deleted := strings.Join(ps.deleted, ",")
	ps.mu.Unlock()
	if deleted != "sb1:8080" {
		t.Errorf("server deleted %q", deleted)
	}
	if code, _, _ := run(t, nil, "port", "unexpose", "sb1"); code != ExitUsage {
		t.Errorf("unexpose without PORT: exit %d", code)
	}
}

func TestPortForward(t *testing.T) {
	ps := &portServer{t: t}
	fakeServer(t, ps.mux())
	// An http port, or one not exposed, is refused before listening.
	if code, _, errOut := run(t, nil, "port", "forward", "sb1", "8080"); code != ExitError || !strings.Contains(errOut, "exposed as http") {
		t.Errorf("forward of an http port: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, nil, "port", "forward", "sb1", "23"); code != ExitError || !strings.Contains(errOut, "not exposed") {
		t.Errorf("forward of an unexposed port: exit %d, %q", code, errOut)
	}

	pr, pw := io.Pipe()
	var errOut strings.Builder
	e := newEnv(strings.NewReader(""), pw, &errOut)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- portForward(ctx, e, []string{"sb1", "22"})
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no local address printed: %v", err)
	}
	addr := strings.TrimSpace(line)
	go io.Copy(io.Discard, pr)
	for i, msg := range []string{"first", "second"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		c.Write([]byte(msg))
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != msg+"|eof" {
			t.Errorf("connection %d through the forward: %q, %v", i, got, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("forward ended with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("forward did not stop with its context")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("the local listener is still open")
	}
}

// TestPortListE2BRule: the rule of a sandbox made through the E2B API, port
// 0 on the wire, is listed as "*". Sandbox sb1's rule is private, sb2's
// public.
func TestPortListE2BRule(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		writeJSONResp(w, 200, sandboxv1.ServicePortList{Ports: []sandboxv1.ServicePort{
			{Port: 0, Protocol: "http", Public: id == "sb2", URL: "http://{port}-" + id + ".localhost:7070/", CreatedAt: created},
			{Port: 8080, Protocol: "http", Public: true, URL: "http://8080-" + id + ".localhost:7070/", CreatedAt: created},
		}})
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "port", "list", "sb1")
	if code != 0 || !strings.Contains(out, "\n*     http      private (E2B traffic token)  http://{port}-sb1.localhost:7070/\n") ||
		!strings.Contains(out, "\n8080  http      public") {
		t.Errorf("port list: exit %d, stdout %q, stderr %q; want the E2B rule as port *", code, out, errOut)
	}
	if code, out, _ := run(t, nil, "port", "list", "sb2"); code != 0 || !strings.Contains(out, "\n*     http      public  ") {
		t.Errorf("port list of a public E2B rule: exit %d, stdout %q", code, out)
	}
}
