package space

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// ReadFile opens a file in a sandbox for reading. The content streams from the
// server as it is read; the caller closes the reader.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	p, err := filesPath(id, "", path)
	if err != nil {
		return nil, fmt.Errorf("read file: %w", err)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: p, query: url.Values{"path": {path}}})
	if err != nil {
		return nil, fmt.Errorf("read %s in sandbox %s: %w", path, id, err)
	}
	return resp.Body, nil
}

// WriteFile creates or replaces a file in a sandbox with the content of r, which is
// streamed: it is never held in memory whole.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader) error {
	p, err := filesPath(id, "", path)
	if err != nil {
		return fmt.Errorf("write file: %w", err)
	}
	// net/http closes a request body that is an io.Closer; r belongs to the
	// caller (often os.Stdin), so hand it over without its Close. The body then
	// has no known length and is sent chunked, as it is read.
	body := io.NopCloser(r)
	req := request{method: http.MethodPut, path: p, query: url.Values{"path": {path}}, body: body}
	if err := c.call(ctx, req, nil, nil, 0); err != nil {
		return fmt.Errorf("write %s in sandbox %s: %w", path, id, err)
	}
	return nil
}

// RemoveFile removes a file or a directory tree in a sandbox.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	return c.fileOp(ctx, http.MethodDelete, id, "", url.Values{"path": {path}}, path, "remove")
}

// MakeDir creates a directory, and its missing parents, in a sandbox.
func (c *Client) MakeDir(ctx context.Context, id, path string) error {
	return c.fileOp(ctx, http.MethodPost, id, "/mkdir", url.Values{"path": {path}}, path, "mkdir")
}

// MoveFile renames from to to in a sandbox.
func (c *Client) MoveFile(ctx context.Context, id, from, to string) error {
	if to == "" {
		return fmt.Errorf("move %s in sandbox %s: destination is empty", from, id)
	}
	return c.fileOp(ctx, http.MethodPost, id, "/move", url.Values{"from": {from}, "to": {to}}, from, "move")
}

// fileOp performs a files call whose answer body is not needed.
func (c *Client) fileOp(ctx context.Context, method, id, suffix string, q url.Values, path, what string) error {
	p, err := filesPath(id, suffix, path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := c.call(ctx, request{method: method, path: p, query: q}, nil, nil, 0); err != nil {
		return fmt.Errorf("%s %s in sandbox %s: %w", what, path, id, err)
	}
	return nil
}

// StatFile returns the entry of one file in a sandbox (as a listing of its
// directory shows it) without listing the directory; a NotFound error when
// there is no such file.
func (c *Client) StatFile(ctx context.Context, id, path string) (*sandboxv1.FileEntry, error) {
	p, err := filesPath(id, "/stat", path)
	if err != nil {
		return nil, fmt.Errorf("stat file: %w", err)
	}
	var entry sandboxv1.FileEntry
	if err := c.call(ctx, request{method: http.MethodGet, path: p, query: url.Values{"path": {path}}}, nil, &entry, maxErrorBody); err != nil {
		return nil, fmt.Errorf("stat %s in sandbox %s: %w", path, id, err)
	}
	return &entry, nil
}

// ListFiles lists a directory in a sandbox, descending depth levels (1: the
// directory's own entries; 0 lets the server choose).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]sandboxv1.FileEntry, error) {
	p, err := filesPath(id, "/list", path)
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var list sandboxv1.FileList
	if err := c.call(ctx, request{method: http.MethodGet, path: p, query: q}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list %s in sandbox %s: %w", path, id, err)
	}
	return list.Entries, nil
}

// ListFilesPage lists one page of a directory's own entries (one level), at
// most limit of them (0 lets the server choose), from where pageToken left
// off ("" for the first page). The answer's NextPageToken is the pageToken
// of the next page; it is empty once the listing is complete. Entries come
// in the directory's order, not sorted by name. A directory past the
// server's unpaged limit can only be listed this way.
func (c *Client) ListFilesPage(ctx context.Context, id, path string, limit int, pageToken string) (sandboxv1.FileList, error) {
	p, err := filesPath(id, "/list", path)
	if err != nil {
		return sandboxv1.FileList{}, fmt.Errorf("list files: %w", err)
	}
	if limit < 0 {
		return sandboxv1.FileList{}, fmt.Errorf("list %s in sandbox %s: limit %d: want 0 or more", path, id, limit)
	}
	if limit == 0 && pageToken == "" {
		limit = defaultFilesPage
	}
	q := url.Values{"path": {path}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if pageToken != "" {
		q.Set("page_token", pageToken)
	}
	var list sandboxv1.FileList
	if err := c.call(ctx, request{method: http.MethodGet, path: p, query: q}, nil, &list, maxJSONBody); err != nil {
		return sandboxv1.FileList{}, fmt.Errorf("list %s in sandbox %s: %w", path, id, err)
	}
	return list, nil
}

// defaultFilesPage is the page size ListFilesPage asks for when given none,
// so that its first request is a paged one.
const defaultFilesPage = 1000

// filesPath returns /v1/sandboxes/{id}/files{suffix}, refusing an empty path.
func filesPath(id, suffix, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("path is empty")
	}
	return sandboxPath(id, "/files"+suffix)
}

// FileWatcher delivers the changes under a watched path in a sandbox.
type FileWatcher struct {
	conn *websocket.Conn
}

// WatchFiles starts watching path in a sandbox, and everything below it when
// recursive is set. The watch ends when ctx does or on Close.
func (c *Client) WatchFiles(ctx context.Context, id, path string, recursive bool) (*FileWatcher, error) {
	if path == "" {
		return nil, fmt.Errorf("watch files in sandbox %s: path is empty", id)
	}
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	conn, err := c.dialStream(ctx, id, "/files/watch", q)
	if err != nil {
		return nil, fmt.Errorf("watch %s in sandbox %s: %w", path, id, err)
	}
	return &FileWatcher{conn: conn}, nil
}

// Next waits for the next event. It returns io.EOF when the server ended the
// watch normally.
func (w *FileWatcher) Next(ctx context.Context) (sandboxv1.FileEvent, error) {
	for {
		typ, data, err := w.conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return sandboxv1.FileEvent{}, io.EOF
			}
			if ctx.Err() != nil {
				return sandboxv1.FileEvent{}, fmt.Errorf("watch: %w", ctx.Err())
			}
			return sandboxv1.FileEvent{}, fmt.Errorf("watch stream ended: %w", err)
		}
		if typ != websocket.MessageText {
			continue
		}
		var ev sandboxv1.FileEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return sandboxv1.FileEvent{}, fmt.Errorf("watch: malformed event from server: %w", err)
		}
		return ev, nil
	}
}

// Close ends the watch.
func (w *FileWatcher) Close() error {
	return w.conn.Close(websocket.StatusNormalClosure, "")
}
