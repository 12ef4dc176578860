package space

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/coder/websocket"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// echoExec is a streaming exec handler: it echoes stdin on stdout, writes the
// command on stderr, reports signals and resizes on stdout, and exits with the
// code in the last argument when stdin closes.
func echoExec(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		var start sandboxv1.ExecStart
		if err := readMsg(ctx, conn, &start); err != nil {
			return
		}
		send := func(m sandboxv1.ExecMessage) { _ = writeMsg(ctx, conn, m) }
		send(sandboxv1.ExecMessage{Type: "started", Pid: 42})
		send(sandboxv1.ExecMessage{Type: "stderr", Data: []byte(strings.Join(start.Cmd, " "))})
		for {
			var m sandboxv1.ExecMessage
			if err := readMsg(ctx, conn, &m); err != nil {
				return
			}
			switch m.Type {
			case "stdin":
				send(sandboxv1.ExecMessage{Type: "stdout", Data: m.Data})
			case "signal":
				send(sandboxv1.ExecMessage{Type: "stdout", Data: fmt.Appendf(nil, "<signal %d>", m.Signal)})
			case "resize":
				send(sandboxv1.ExecMessage{Type: "stdout", Data: fmt.Appendf(nil, "<resize %dx%d>", m.Cols, m.Rows)})
			case "close_stdin":
				var code int
				fmt.Sscan(start.Cmd[len(start.Cmd)-1], &code)
				send(sandboxv1.ExecMessage{Type: "exit", ExitCode: &code})
				conn.Close(websocket.StatusNormalClosure, "")
				return
			}
		}
	}
}

func readMsg(ctx context.Context, conn *websocket.Conn, v any) error {
	_, b, err := conn.Read(ctx)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeMsg(ctx context.Context, conn *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func TestExecStream(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", echoExec(t))
	c := newTestServer(t, mux)
	var stdout, stderr bytes.Buffer
	s, err := c.StartExec(context.Background(), "sb-1", sandboxv1.ExecStart{Cmd: []string{"cat", "7"}}, StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 3*stdinChunk+5) // more than one stdin message
	if _, err := s.Stdin().Write(append([]byte("hello "), big...)); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(context.Background(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := s.Resize(context.Background(), 100, 30); err != nil {
		t.Fatal(err)
	}
	if err := s.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	code, err := s.Wait()
	if err != nil || code != 7 {
		t.Fatalf("Wait = %d, %v; want 7, nil", code, err)
	}
	want := "hello " + string(big) + "<signal 2><resize 100x30>"
	if stdout.String() != want {
		t.Errorf("stdout = %d bytes %.40q…, want %d bytes", stdout.Len(), stdout.String(), len(want))
	}
	if stderr.String() != "cat 7" {
		t.Errorf("stderr = %q, want %q", stderr.String(), "cat 7")
	}
	if s.Pid() != 42 {
		t.Errorf("pid = %d, want 42", s.Pid())
	}
	if err := s.Stdin().Close(); err != nil {
		t.Errorf("second close of stdin: %v", err)
	}
	if _, err := s.Stdin().Write([]byte("late")); err == nil {
		t.Error("write to stdin after exit succeeded")
	}
}

func TestExecStreamPipes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", echoExec(t))
	c := newTestServer(t, mux)
	s, err := c.StartExec(context.Background(), "sb-1", sandboxv1.ExecStart{Cmd: []string{"cat", "0"}}, StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var stdout, stderr []byte
	var outErr, errErr error
	wg.Add(2)
	go func() { defer wg.Done(); stdout, outErr = io.ReadAll(s.Stdout()) }()
	go func() { defer wg.Done(); stderr, errErr = io.ReadAll(s.Stderr()) }()
	fmt.Fprint(s.Stdin(), "abc")
	s.CloseStdin()
	code, err := s.Wait()
	wg.Wait()
	if code != 0 || err != nil || outErr != nil || errErr != nil {
		t.Fatalf("Wait = %d, %v; read errors %v, %v", code, err, outErr, errErr)
	}
	if string(stdout) != "abc" || string(stderr) != "cat 0" {
		t.Errorf("stdout %q stderr %q, want abc and %q", stdout, stderr, "cat 0")
	}
}

func TestExecStreamServerError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		var start sandboxv1.ExecStart
		_ = readMsg(r.Context(), conn, &start)
		_ = writeMsg(r.Context(), conn, sandboxv1.ExecMessage{Type: "error", Message: "no such command: " + start.Cmd[0]})
		conn.Close(websocket.StatusNormalClosure, "")
	})
	c := newTestServer(t, mux)
	s, err := c.StartExec(context.Background(), "sb-1", sandboxv1.ExecStart{Cmd: []string{"nope"}}, StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Wait()
	var se *StreamError
	if !errors.As(err, &se) || se.Message != "no such command: nope" {
		t.Errorf("err = %v, want StreamError naming the command", err)
	}
}

func TestExecStreamBrokenConnection(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_ = writeMsg(r.Context(), conn, sandboxv1.ExecMessage{Type: "stdout", Data: []byte("partial")})
		conn.CloseNow() // the sandbox died mid-exec
	})
	c := newTestServer(t, mux)
	s, err := c.StartExec(context.Background(), "sb-1", sandboxv1.ExecStart{Cmd: []string{"x"}}, StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if code, err := s.Wait(); err == nil || code != -1 {
		t.Errorf("Wait = %d, %v; want -1 and an error", code, err)
	}
}

func TestExecStreamRefused(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox sb-x not found")
	})
	c := newTestServer(t, mux)
	_, err := c.StartExec(context.Background(), "sb-x", sandboxv1.ExecStart{Cmd: []string{"x"}}, StreamOptions{})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Message != "sandbox sb-x not found" {
		t.Errorf("err = %v, want the 404 APIError", err)
	}
}

func TestExecStreamCloseUnblocksUnreadPipe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		for r.Context().Err() == nil {
			if writeMsg(r.Context(), conn, sandboxv1.ExecMessage{Type: "stdout", Data: []byte("spam")}) != nil {
				return
			}
		}
	})
	c := newTestServer(t, mux)
	s, err := c.StartExec(context.Background(), "sb-1", sandboxv1.ExecStart{Cmd: []string{"yes"}}, StreamOptions{Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads Stdout; Close must still end the stream.
	s.Close()
	if _, err := s.Wait(); err == nil {
		t.Error("Wait after Close returned no error")
	}
}

// streamSource produces size bytes of a fixed pattern and fails the test when
// the client has read more than window bytes ahead of what the server received.
type streamSource struct {
	t        *testing.T
	size     int64
	produced int64
	received *atomicInt
	window   int64
}

type atomicInt struct {
	mu sync.Mutex
	n  int64
}

func (a *atomicInt) add(n int64) { a.mu.Lock(); a.n += n; a.mu.Unlock() }
func (a *atomicInt) get() int64  { a.mu.Lock(); defer a.mu.Unlock(); return a.n }

func (s *streamSource) Read(p []byte) (int, error) {
	if s.produced >= s.size {
		return 0, io.EOF
	}
	if ahead := s.produced - s.received.get(); ahead > s.window {
		return 0, fmt.Errorf("client read %d bytes ahead of the server: the body is buffered, not streamed", ahead)
	}
	n := int(min(int64(len(p)), s.size-s.produced))
	for i := range n {
		p[i] = byte((s.produced + int64(i)) % 251)
	}
	s.produced += int64(n)
	return n, nil
}

func patternSum(size int64) [32]byte {
	h := sha256.New()
	src := &streamSource{size: size, received: &atomicInt{}, window: 1 << 62}
	io.Copy(h, src)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func TestWriteFileStreams(t *testing.T) {
	const size = 128 << 20
	received := &atomicInt{}
	var gotSum [32]byte
	var gotPath string
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.Query().Get("path")
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			h.Write(buf[:n])
			received.add(int64(n))
			if err != nil {
				break
			}
		}
		copy(gotSum[:], h.Sum(nil))
		w.WriteHeader(http.StatusNoContent)
	})
	c := newTestServer(t, mux)
	src := &streamSource{t: t, size: size, received: received, window: 32 << 20}
	if err := c.WriteFile(context.Background(), "sb-1", "/tmp/big file", src); err != nil {
		t.Fatal(err)
	}
	if received.get() != size || gotSum != patternSum(size) {
		t.Errorf("server received %d bytes (sum match %v), want %d identical bytes", received.get(), gotSum == patternSum(size), size)
	}
	if gotPath != "/tmp/big file" {
		t.Errorf("path = %q", gotPath)
	}
}

func TestReadFileAndListAndErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") != "/etc/hostname" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "no such file")
			return
		}
		io.WriteString(w, "sandbox\n")
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		writeJSON(w, 200, sandboxv1.FileList{Entries: []sandboxv1.FileEntry{{Name: q.Get("depth"), Path: q.Get("path"), Type: "dir"}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/files/move", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("from") != "/a" || r.URL.Query().Get("to") != "/b" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "bad move")
			return
		}
		w.WriteHeader(204)
	})
	c := newTestServer(t, mux)
	ctx := context.Background()
	rc, err := c.ReadFile(ctx, "sb-1", "/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "sandbox\n" {
		t.Errorf("content = %q", b)
	}
	if _, err := c.ReadFile(ctx, "sb-1", "/nope"); !IsNotFound(err) {
		t.Errorf("read missing file: err = %v, want not_found", err)
	}
	entries, err := c.ListFiles(ctx, "sb-1", "/home", 2)
	if err != nil || len(entries) != 1 || entries[0].Path != "/home" || entries[0].Name != "2" {
		t.Errorf("ListFiles = %+v, %v; want path and depth passed through", entries, err)
	}
	if err := c.MoveFile(ctx, "sb-1", "/a", "/b"); err != nil {
		t.Error(err)
	}
}

func TestWatchFiles(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/watch", func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		_ = writeMsg(r.Context(), conn, sandboxv1.FileEvent{Name: r.URL.Query().Get("path") + "/x", Type: "create"})
		_ = writeMsg(r.Context(), conn, sandboxv1.FileEvent{Name: r.URL.Query().Get("recursive"), Type: "write"})
		conn.Close(websocket.StatusNormalClosure, "")
	})
	c := newTestServer(t, mux)
	ctx := context.Background()
	w, err := c.WatchFiles(ctx, "sb-1", "/tmp", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got []sandboxv1.FileEvent
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	want := []sandboxv1.FileEvent{{Name: "/tmp/x", Type: "create"}, {Name: "true", Type: "write"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// TestListFilesPage pages through a listing: limit and page_token reach the
// server, next_page_token comes back, and the pages end when it is empty.
func TestListFilesPage(t *testing.T) {
	const total = 7
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limit, err := strconv.Atoi(q.Get("limit"))
		if err != nil || limit < 1 || q.Get("depth") != "" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "want a limit and no depth, got "+r.URL.RawQuery)
			return
		}
		from := 0
		if tok := q.Get("page_token"); tok != "" {
			if from, err = strconv.Atoi(strings.TrimPrefix(tok, "at-")); err != nil {
				writeErr(w, 400, sandboxv1.CodeInvalidArgument, "bad page token")
				return
			}
		}
		var out sandboxv1.FileList
		for i := from; i < total && i < from+limit; i++ {
			out.Entries = append(out.Entries, sandboxv1.FileEntry{Name: strconv.Itoa(i), Path: q.Get("path") + "/" + strconv.Itoa(i)})
		}
		if from+limit < total {
			out.NextPageToken = "at-" + strconv.Itoa(from+limit)
		}
		writeJSON(w, 200, out)
	})
	c := newTestServer(t, mux)
	ctx := context.Background()
	var names []string
	token, pages := "", 0
	for {
		page, err := c.ListFilesPage(ctx, "sb-1", "/many", 3, token)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, e := range page.Entries {
			names = append(names, e.Name)
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
	}
	if pages != 3 || strings.Join(names, ",") != "0,1,2,3,4,5,6" {
		t.Errorf("%d pages of %v, want 3 pages of 0…6", pages, names)
	}
	if _, err := c.ListFilesPage(ctx, "sb-1", "/many", 3, "at-x"); !IsCode(err, sandboxv1.CodeInvalidArgument) {
		t.Errorf("a bad token: %v, want invalid_argument", err)
	}
	if _, err := c.ListFilesPage(ctx, "sb-1", "/many", -1, ""); err == nil {
		t.Error("limit -1 accepted")
	}
}
