package nodeclient

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// tunnelNode answers tunnels to port 22 of exec e1 carrying capability
// "cap-ok", echoing until the client's half-close and then saying "|eof";
// capability "cap-old" gets RefreshRoute.
func tunnelNode(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /node/v1/executions/{exec}/tcp/{port}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(TokenHeader) != "tok" || r.Header.Get("Upgrade") != TCPUpgrade || r.PathValue("exec") != "e1" || r.PathValue("port") != "22" {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(nodev1.Error{Code: "invalid_argument", Message: "bad tunnel request"})
			return
		}
		switch r.Header.Get(capability.Header) {
		case "cap-old":
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(nodev1.Error{Code: "refresh_route", Message: "another generation"})
			return
		case "cap-ok":
		default:
			w.WriteHeader(http.StatusForbidden)
			json.NewEncoder(w).Encode(nodev1.Error{Code: "permission_denied", Message: "bad capability"})
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\nhello:")
		io.Copy(conn, brw.Reader)
		io.WriteString(conn, "|eof")
	})
	return mux
}

func TestDialPortTCP(t *testing.T) {
	tcpSrv := httptest.NewServer(tunnelNode(t))
	defer tcpSrv.Close()
	sock := filepath.Join(t.TempDir(), "node.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	unixSrv := httptest.NewUnstartedServer(tunnelNode(t))
	unixSrv.Listener = ln
	unixSrv.Start()
	defer unixSrv.Close()

	for name, addr := range map[string]string{"tcp": strings.TrimPrefix(tcpSrv.URL, "http://"), "unix": "unix:" + sock} {
		t.Run(name, func(t *testing.T) {
			c, err := New(addr, "tok")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := c.DialPortTCP(t.Context(), "e1", 22, "cap-ok")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(time.Minute))
			conn.Write([]byte("ping"))
			if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if got, err := io.ReadAll(conn); err != nil || string(got) != "hello:ping|eof" {
				t.Errorf("through the tunnel: %q, %v", got, err)
			}

			_, err = c.DialPortTCP(t.Context(), "e1", 22, "cap-old")
			if !errors.Is(err, ErrRefreshRoute) || !errors.Is(err, errdefs.ErrUnavailable) || errdefs.ReasonOf(err) != "refresh_route" {
				t.Errorf("stale capability: %v, want ErrRefreshRoute", err)
			}
			_, err = c.DialPortTCP(t.Context(), "e1", 22, "forged")
			if !errors.Is(err, errdefs.ErrPermissionDenied) || errors.Is(err, ErrRefreshRoute) {
				t.Errorf("bad capability: %v, want permission denied", err)
			}
		})
	}
}

func TestPortHTTP(t *testing.T) {
	c, err := New("127.0.0.1:1", "tok")
	if err != nil {
		t.Fatal(err)
	}
	if _, base := c.PortHTTP("sb-g1-x/..", 8080); base != "http://127.0.0.1:1/node/v1/executions/sb-g1-x%2F../ports/8080" {
		t.Errorf("PortHTTP base %q", base)
	}
}
