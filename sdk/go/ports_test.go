package space

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// portMux serves the port routes; its tunnel echoes until the client's
// half-close, then says "|eof".
func portMux(t *testing.T, deleted *string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.ExposePortRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Public || req.Protocol != "tcp" {
			writeErr(w, http.StatusBadRequest, sandboxv1.CodeInvalidArgument, fmt.Sprintf("unexpected %+v %v", req, err))
			return
		}
		writeJSON(w, http.StatusCreated, sandboxv1.ServicePort{Port: req.Port, Protocol: req.Protocol, Public: true, URL: "http://x/tcp"})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, sandboxv1.ServicePortList{Ports: []sandboxv1.ServicePort{{Port: 8080, Protocol: "http", URL: "http://8080-sb.localhost/"}}})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/ports/{port}", func(w http.ResponseWriter, r *http.Request) {
		*deleted = r.PathValue("id") + ":" + r.PathValue("port")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports/{port}/tcp", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("port") != "22" {
			writeErr(w, http.StatusNotFound, sandboxv1.CodeNotFound, "no exposed port")
			return
		}
		if r.Header.Get("Upgrade") != sandboxv1.TCPUpgrade || !strings.EqualFold(r.Header.Get("Connection"), "upgrade") {
			writeErr(w, http.StatusBadRequest, sandboxv1.CodeInvalidArgument, "no upgrade")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\nhi:")
		io.Copy(conn, brw.Reader)
		io.WriteString(conn, "|eof")
	})
	return mux
}

func TestPortCalls(t *testing.T) {
	var deleted string
	c := newTestServer(t, portMux(t, &deleted))
	ctx := context.Background()
	if sp, err := c.ExposePort(ctx, "sb1", sandboxv1.ExposePortRequest{Port: 22, Protocol: "tcp", Public: true}); err != nil || sp.URL != "http://x/tcp" || !sp.Public {
		t.Errorf("ExposePort = %+v, %v", sp, err)
	}
	if list, err := c.ListPorts(ctx, "sb1"); err != nil || len(list) != 1 || list[0].Port != 8080 {
		t.Errorf("ListPorts = %+v, %v", list, err)
	}
	if err := c.UnexposePort(ctx, "sb1", 8080); err != nil || deleted != "sb1:8080" {
		t.Errorf("UnexposePort = %v, server deleted %q", err, deleted)
	}
	if err := c.UnexposePort(ctx, "", 8080); err == nil {
		t.Error("UnexposePort accepted an empty id")
	}

	conn, err := c.DialPort(ctx, "sb1", 22)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hi:ping|eof" {
		t.Errorf("through the tunnel: %q, %v; want \"hi:ping|eof\"", got, err)
	}

	_, err = c.DialPort(ctx, "sb1", 23)
	if !IsNotFound(err) {
		t.Errorf("DialPort of an unexposed port: %v, want not found", err)
	}
	bad := NewClient(c.BaseURL(), "wrong")
	var ae *APIError
	if _, err := bad.DialPort(ctx, "sb1", 22); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Errorf("DialPort with a wrong key: %v, want HTTP 401", err)
	}
}
