package cli

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// lazyInput yields size bytes of a pattern and fails the read when the CLI has
// taken more than window bytes beyond what the server has received, which is
// what buffering the whole input would do.
type lazyInput struct {
	size, produced, window int64
	mu                     sync.Mutex
	received               int64
}

func (l *lazyInput) got(n int) { l.mu.Lock(); l.received += int64(n); l.mu.Unlock() }

func (l *lazyInput) Read(p []byte) (int, error) {
	if l.produced >= l.size {
		return 0, io.EOF
	}
	l.mu.Lock()
	ahead := l.produced - l.received
	l.mu.Unlock()
	if ahead > l.window {
		return 0, fmt.Errorf("read %d bytes ahead of the server: stdin is being buffered", ahead)
	}
	n := int(min(int64(len(p)), l.size-l.produced))
	for i := range n {
		p[i] = byte((l.produced + int64(i)) % 253)
	}
	l.produced += int64(n)
	return n, nil
}

func TestFilesWriteStreamsStdin(t *testing.T) {
	const size = 96 << 20
	in := &lazyInput{size: size, window: 32 << 20}
	var sum []byte
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			h.Write(buf[:n])
			in.got(n)
			if err != nil {
				break
			}
		}
		sum = h.Sum(nil)
		w.WriteHeader(http.StatusNoContent)
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, in, "files", "write", "sb-1", "/data/big")
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := sha256.New()
	io.Copy(want, &lazyInput{size: size, window: 1 << 62})
	if in.received != size || string(sum) != string(want.Sum(nil)) {
		t.Errorf("server got %d bytes, want %d identical", in.received, size)
	}
}

func TestFilesReadLsWatch(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "content of "+r.URL.Query().Get("path"))
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Get("limit") != "" || q.Get("page_token") != "" {
			next := ""
			if q.Get("page_token") == "" {
				next = "tok-2"
			}
			writeJSONResp(w, 200, sandboxv1.FileList{Entries: []sandboxv1.FileEntry{{Name: "p", Path: "/many/p" + q.Get("limit") + q.Get("page_token")}}, NextPageToken: next})
			return
		}
		writeJSONResp(w, 200, sandboxv1.FileList{Entries: []sandboxv1.FileEntry{
			{Name: "a", Path: r.URL.Query().Get("path") + "/a", Type: "file", Size: 12, Mode: 0o644, Owner: "user", ModifiedAt: created},
			{Name: "l", Path: "/l", Type: "symlink", Mode: 0o777, SymlinkTarget: "/etc"},
		}})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/watch", func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		conn.Write(r.Context(), websocket.MessageText, []byte(`{"name":"/tmp/new","type":"create"}`))
		conn.Write(r.Context(), websocket.MessageText, []byte(`{"name":"/tmp/new","type":"write"}`))
		conn.Close(websocket.StatusNormalClosure, "")
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/mkdir", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 409, sandboxv1.CodeConflict, r.URL.Query().Get("path")+" exists")
	})
	fakeServer(t, mux)
	if code, out, errOut := run(t, nil, "files", "read", "sb-1", "/etc/os-release"); code != 0 || out != "content of /etc/os-release" {
		t.Errorf("read: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut := run(t, nil, "files", "ls", "sb-1", "/home")
	if code != 0 || !strings.Contains(out, "/home/a") || !strings.Contains(out, "/l -> /etc") || !strings.Contains(out, "0644") {
		t.Errorf("ls: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "files", "ls", "sb-1", "/many", "--limit", "2")
	if code != 0 || !strings.Contains(out, "/many/p2") || errOut != "more entries follow: --page-token tok-2\n" {
		t.Errorf("ls --limit 2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, nil, "files", "ls", "sb-1", "/many", "--page-token", "tok-2", "-o", "json")
	if code != 0 || !strings.Contains(out, `"/many/ptok-2"`) || strings.Contains(out, "next_page_token") || errOut != "" {
		t.Errorf("ls --page-token tok-2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := run(t, nil, "files", "ls", "sb-1", "/many", "--limit", "2", "--depth", "2"); code != 2 {
		t.Errorf("ls --limit with --depth 2: exit %d, want 2", code)
	}
	if code, out, errOut := run(t, nil, "files", "watch", "sb-1", "/tmp", "--recursive"); code != 0 || out != "create /tmp/new\nwrite /tmp/new\n" {
		t.Errorf("watch: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, "files", "mkdir", "sb-1", "/x"); code != 1 || errOut != "space: /x exists\n" {
		t.Errorf("mkdir conflict: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := run(t, nil, "files", "mv", "sb-1", "/a"); code != 2 {
		t.Errorf("mv with one path: exit %d, want 2", code)
	}
}
