package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/uploadbody"
)

// maxPathLen bounds a path given to the file API.
const maxPathLen = 4096

// pathParam reads and checks a path query parameter. The path is resolved by
// the guest inside the sandbox, never on the host; here it only has to be a
// sane string.
func pathParam(r *http.Request, name string) (string, error) {
	p := r.URL.Query().Get(name)
	switch {
	case p == "":
		return "", fmt.Errorf("%w: query parameter %q is required", errdefs.ErrInvalidArgument, name)
	case len(p) > maxPathLen:
		return "", fmt.Errorf("%w: %s is longer than %d bytes", errdefs.ErrInvalidArgument, name, maxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("%w: %s must not contain NUL bytes", errdefs.ErrInvalidArgument, name)
	}
	return p, nil
}

func (a *API) fileTarget(w http.ResponseWriter, r *http.Request) (*Guest, string, bool) {
	g, path, release, ok := a.fileTargetOf(w, r, false)
	if ok {
		release()
	}
	return g, path, ok
}

// fileStreamTarget is fileTarget for a long-lived operation (a transfer, a
// watch): it holds one of the sandbox's stream slots until release.
func (a *API) fileStreamTarget(w http.ResponseWriter, r *http.Request) (*Guest, string, func(), bool) {
	return a.fileTargetOf(w, r, true)
}

func (a *API) fileTargetOf(w http.ResponseWriter, r *http.Request, stream bool) (*Guest, string, func(), bool) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return nil, "", nil, false
	}
	path, err := pathParam(r, "path")
	if err != nil {
		a.writeError(w, r, err)
		return nil, "", nil, false
	}
	release := func() {}
	if stream {
		if release, err = a.host.OpenStream(sb); err != nil {
			a.writeError(w, r, err)
			return nil, "", nil, false
		}
	}
	g, err := a.host.Guest(r.Context(), sb, capability.OpFiles)
	if err != nil {
		release()
		a.writeError(w, r, err)
		return nil, "", nil, false
	}
	return g, path, release, true
}

func guestFilesURL(g *Guest, path, user string) string {
	q := url.Values{"path": {path}}
	if user != "" {
		q.Set("username", user)
	}
	return g.Base + "/files?" + q.Encode()
}

// handleReadFile streams a file out of the sandbox.
func (a *API) handleReadFile(w http.ResponseWriter, r *http.Request) {
	g, path, release, ok := a.fileStreamTarget(w, r)
	if !ok {
		return
	}
	defer release()
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, guestFilesURL(g, path, r.URL.Query().Get("user")), nil)
	resp, err := g.HTTP.Do(req)
	if err != nil {
		a.writeError(w, r, transportError("read "+path, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.writeError(w, r, guestHTTPError("read "+path, resp))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if cl := resp.Header.Get("Content-Length"); cl != "" {
		w.Header().Set("Content-Length", cl)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = copyLarge(w, resp.Body)
}

// handleWriteFile streams the request body into a file in the sandbox.
//
// The body is bounded three ways before any of it reaches the guest: a
// Content-Length over MaxFileBytes is refused at once (413, the sandbox not
// even looked up, let alone woken); a body longer than it says or without a
// length is cut at MaxFileBytes (413); a body that stalls — a Content-Length
// larger than what is sent, a client gone silent — is refused after
// UploadIdleTimeout without a byte (400). The guest keeps the previous file
// in each case (it renames a complete upload into place).
func (a *API) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > a.cfg.MaxFileBytes {
		a.writeError(w, r, fmt.Errorf("%w: the body's Content-Length %d is over the %d byte file limit", errTooLarge, r.ContentLength, a.cfg.MaxFileBytes))
		return
	}
	g, path, release, ok := a.fileStreamTarget(w, r)
	if !ok {
		return
	}
	defer release()
	idle := uploadbody.Limit(w, r, a.cfg.MaxFileBytes, a.cfg.UploadIdleTimeout)
	body := largeCopyReader{idle}
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, guestFilesURL(g, path, r.URL.Query().Get("user")), body)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = r.ContentLength
	resp, err := g.HTTP.Do(req)
	if err != nil {
		if isMaxBytes(err) {
			a.writeError(w, r, fmt.Errorf("%w: file is over the %d byte limit", errTooLarge, a.cfg.MaxFileBytes))
			return
		}
		if idle.Stalled() {
			a.writeError(w, r, fmt.Errorf("%w: write %s: the upload's body sent nothing for %s (a Content-Length larger than the body?); the file was not written", errdefs.ErrInvalidArgument, path, a.cfg.UploadIdleTimeout))
			return
		}
		a.writeError(w, r, transportError("write "+path, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		a.writeError(w, r, guestHTTPError("write "+path, resp))
		return
	}
	// The guest's answer (what it wrote: a few hundred bytes) is read to
	// its end, so the stream ends on every hop: closed unread, it is cut,
	// and the node's and the host bridge's proxies abort it mid-answer
	// (a vm guest's answer comes in pieces). Its 200 says the file is in
	// place; an answer that does not end is given up after
	// uploadAnswerTimeout, so a guest cannot hold the upload open.
	cut := time.AfterFunc(uploadAnswerTimeout, func() { resp.Body.Close() })
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxUploadAnswer))
	cut.Stop()
	w.WriteHeader(http.StatusNoContent)
}

// maxUploadAnswer and uploadAnswerTimeout bound what handleWriteFile
// reads of the guest's answer to an upload, which it does not pass on.
const (
	maxUploadAnswer     = 64 << 10
	uploadAnswerTimeout = 5 * time.Second
)

// fileCopyBuffer is the buffer file bodies are copied with on their way to
// and from the node: io.Copy's 32 KiB makes a 100 MiB file 3,200 socket
// writes (and, through the node's proxy, as many flushes); 256 KiB, 400.
const fileCopyBuffer = 256 << 10

var fileCopyBuffers = sync.Pool{New: func() any { b := make([]byte, fileCopyBuffer); return &b }}

// copyLarge is io.Copy with a fileCopyBuffer buffer, whatever dst and src
// implement.
func copyLarge(dst io.Writer, src io.Reader) (int64, error) {
	bp := fileCopyBuffers.Get().(*[]byte)
	defer fileCopyBuffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// largeCopyReader makes the HTTP client (which io.Copies a request body into
// its connection) send the body in fileCopyBuffer writes.
type largeCopyReader struct{ io.Reader }

func (r largeCopyReader) WriteTo(w io.Writer) (int64, error) { return copyLarge(w, r.Reader) }

// guestHTTPError turns a non-200 answer of the guest's /files into an error.
// A refusal of SPACE's own on the way (the node's or the bridge's, with its
// code and reason) keeps its class and reason (apierr); the guest's own
// answer gets the class of its status.
func guestHTTPError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(b))
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	if refusal, _ := apierr.DecodeBody(b); refusal != nil {
		return fmt.Errorf("%w: %s: %s", refusal, op, msg)
	}
	class := errdefs.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusBadRequest:
		class = errdefs.ErrInvalidArgument
	case http.StatusNotFound:
		class = errdefs.ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		class = errdefs.ErrPermissionDenied
	case http.StatusInsufficientStorage, http.StatusRequestEntityTooLarge:
		class = errdefs.ErrResourceExhausted
	case http.StatusConflict:
		class = errdefs.ErrConflict
	}
	return fmt.Errorf("%w: %s: %s", class, op, msg)
}

func (a *API) handleRemoveFile(w http.ResponseWriter, r *http.Request) {
	g, path, ok := a.fileTarget(w, r)
	if !ok {
		return
	}
	req := asUser(connect.NewRequest(&filesystemv1.RemoveRequest{Path: path}), r.URL.Query().Get("user"))
	if _, err := g.Files.Remove(r.Context(), req); err != nil {
		a.writeError(w, r, GuestError("remove "+path, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) handleMkdir(w http.ResponseWriter, r *http.Request) {
	g, path, ok := a.fileTarget(w, r)
	if !ok {
		return
	}
	req := asUser(connect.NewRequest(&filesystemv1.MakeDirRequest{Path: path}), r.URL.Query().Get("user"))
	resp, err := g.Files.MakeDir(r.Context(), req)
	if err != nil {
		a.writeError(w, r, GuestError("mkdir "+path, err))
		return
	}
	writeJSON(w, http.StatusOK, fileEntry(resp.Msg.GetEntry()))
}

func (a *API) handleMove(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	from, err := pathParam(r, "from")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	to, err := pathParam(r, "to")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	g, err := a.host.Guest(r.Context(), sb, capability.OpFiles)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	req := asUser(connect.NewRequest(&filesystemv1.MoveRequest{Source: from, Destination: to}), r.URL.Query().Get("user"))
	resp, err := g.Files.Move(r.Context(), req)
	if err != nil {
		a.writeError(w, r, GuestError("move "+from, err))
		return
	}
	writeJSON(w, http.StatusOK, fileEntry(resp.Msg.GetEntry()))
}

func (a *API) handleListFiles(w http.ResponseWriter, r *http.Request) {
	g, path, ok := a.fileTarget(w, r)
	if !ok {
		return
	}
	depth := uint32(1)
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.ParseUint(d, 10, 8)
		if err != nil || n < 1 || n > 32 {
			a.writeError(w, r, fmt.Errorf("%w: depth %q: want 1..32", errdefs.ErrInvalidArgument, d))
			return
		}
		depth = uint32(n)
	}
	msg := &filesystemv1.ListDirRequest{Path: path, Depth: depth}
	if err := pageParams(r, msg); err != nil {
		a.writeError(w, r, err)
		return
	}
	req := asUser(connect.NewRequest(msg), r.URL.Query().Get("user"))
	resp, err := g.Files.ListDir(r.Context(), req)
	if err != nil {
		refused := connect.CodeOf(err) == connect.CodeResourceExhausted && msg.PageSize == 0 && msg.PageToken == ""
		err = GuestError("list "+path, err)
		if refused {
			err = fmt.Errorf("%w; list it by pages: ?limit=N, then &page_token= each answer's next_page_token", err)
		}
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.FileList{Entries: []sandboxv1.FileEntry{}, NextPageToken: resp.Msg.GetNextPageToken()}
	for _, e := range resp.Msg.GetEntries() {
		out.Entries = append(out.Entries, fileEntry(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// maxListPage bounds the limit of a paged listing (the guest daemon's own
// maximum page).
const maxListPage = 10000

// pageParams reads the optional limit and page_token of a listing into msg.
// A token is opaque here: the guest daemon that issued it validates it.
func pageParams(r *http.Request, msg *filesystemv1.ListDirRequest) error {
	q := r.URL.Query()
	if l := q.Get("limit"); l != "" {
		n, err := strconv.ParseUint(l, 10, 32)
		if err != nil || n < 1 || n > maxListPage {
			return fmt.Errorf("%w: limit %q: want 1..%d", errdefs.ErrInvalidArgument, l, maxListPage)
		}
		msg.PageSize = uint32(n)
	}
	msg.PageToken = q.Get("page_token")
	if len(msg.PageToken) > 256 {
		return fmt.Errorf("%w: page_token of %d bytes is no token this API issued", errdefs.ErrInvalidArgument, len(msg.PageToken))
	}
	return nil
}

func fileEntry(e *filesystemv1.EntryInfo) sandboxv1.FileEntry {
	typ := "file"
	switch e.GetType() {
	case filesystemv1.FileType_FILE_TYPE_DIRECTORY:
		typ = "dir"
	case filesystemv1.FileType_FILE_TYPE_SYMLINK:
		typ = "symlink"
	}
	return sandboxv1.FileEntry{
		Name: e.GetName(), Path: e.GetPath(), Type: typ, Size: e.GetSize(), Mode: e.GetMode(),
		Owner: e.GetOwner(), Group: e.GetGroup(), ModifiedAt: e.GetModifiedTime().AsTime(),
		SymlinkTarget: e.GetSymlinkTarget(),
	}
}

// handleWatch streams file events of a directory over a WebSocket.
func (a *API) handleWatch(w http.ResponseWriter, r *http.Request) {
	g, path, release, ok := a.fileStreamTarget(w, r)
	if !ok {
		return
	}
	defer release()
	recursive := r.URL.Query().Get("recursive") == "true"
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	req := asUser(connect.NewRequest(&filesystemv1.WatchDirRequest{Path: path, Recursive: recursive}), r.URL.Query().Get("user"))
	stream, err := g.Files.WatchDir(ctx, req)
	if err != nil {
		a.writeError(w, r, GuestError("watch "+path, err))
		return
	}
	defer stream.Close()
	// The guest's first message is its start event: until it has come the
	// watch may still be refused (the guest's watcher cap), and that is
	// answered as an HTTP error before the WebSocket is accepted, not as a
	// WebSocket that opens and closes.
	if !stream.Receive() {
		a.writeError(w, r, watchStartError(path, stream.Err()))
		return
	}
	first := stream.Msg()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	// The client sends nothing; reading notices when it goes away.
	go func() {
		defer cancel()
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	forward := func(msg *filesystemv1.WatchDirResponse) error {
		ev := msg.GetFilesystem()
		if ev == nil {
			return nil
		}
		return writeWS(ctx, ws, sandboxv1.FileEvent{Name: ev.GetName(), Type: eventType(ev.GetType())})
	}
	if err := forward(first); err != nil {
		return
	}
	for stream.Receive() {
		if err := forward(stream.Msg()); err != nil {
			return
		}
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		wctx, done := context.WithTimeout(context.Background(), time.Second)
		_ = writeWS(wctx, ws, map[string]string{"type": "error", "message": GuestError("watch "+path, err).Error()})
		done()
		ws.Close(websocket.StatusInternalError, "watch ended")
		return
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// watchStartError is the answer to a watch the guest refused or ended
// before its start event: its watcher cap (ResourceExhausted) is a stream
// cap like the API's, 429 too_many_streams saying what to do.
func watchStartError(path string, err error) error {
	if err == nil {
		return fmt.Errorf("%w: watch %s: the guest ended the watch before it started; retry", errdefs.ErrUnavailable, path)
	}
	if connect.CodeOf(err) == connect.CodeResourceExhausted && errdefs.ReasonOf(err) == "" {
		msg := err.Error()
		var ce *connect.Error
		if errors.As(err, &ce) {
			msg = ce.Message()
		}
		return fmt.Errorf("%w: watch %s: the sandbox's guest holds as many directory watchers as it may (%s); close a watch first", errdefs.ErrTooManyStreams, path, msg)
	}
	return GuestError("watch "+path, err)
}

func eventType(t filesystemv1.EventType) string {
	name := strings.TrimPrefix(t.String(), "EVENT_TYPE_")
	return strings.ToLower(name)
}

// transportError classes an error of a guest request that got no answer:
// a refused route change keeps its own class (retry is safe), anything else
// is Unavailable.
func transportError(op string, err error) error {
	if errors.Is(err, ErrRouteChanged) {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %v", errdefs.ErrUnavailable, op, err)
}
