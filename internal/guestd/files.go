package guestd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/failpoint"
)

// maxUploadParts bounds the parts of one multipart upload.
const maxUploadParts = 1000

// uploadedEntry is one element of the POST /files answer, as envd sends it.
type uploadedEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
	// Metadata is what the upload's X-Metadata-* headers set (metadata.go).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// getFile streams a regular file: GET /files?path=&username=.
func (d *Daemon) getFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	u, err := d.userNamed(q.Get("username"))
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	p, err := u.resolve(q.Get("path"))
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	// O_NONBLOCK: opening a FIFO must not hang the request.
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		writeHTTPError(w, fmt.Errorf("open %s: %w", p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeHTTPError(w, fmt.Errorf("stat %s: %w", p, err))
		return
	}
	if !fi.Mode().IsRegular() {
		writeHTTPError(w, fmt.Errorf("read %s: not a regular file: %w", p, errBadRequest))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	bw := &bigWriter{ResponseWriter: w}
	if fi.Size() == 0 {
		// Files such as /proc/* report size 0 but have content: stream them.
		_, _ = bw.ReadFrom(f)
		return
	}
	http.ServeContent(bw, r, "", fi.ModTime(), f)
}

// postFile writes files: POST /files?path=&username= with an
// application/octet-stream body or multipart/form-data "file" parts.
func (d *Daemon) postFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	u, err := d.userNamed(q.Get("username"))
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	md, err := parseMetadataHeaders(r.Header)
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeHTTPError(w, fmt.Errorf("gzip body: %v: %w", err, errBadRequest))
			return
		}
		defer zr.Close()
		body = zr
	}
	var written []uploadedEntry
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType == "multipart/form-data" {
		written, err = d.writeMultipart(multipart.NewReader(body, params["boundary"]), q.Get("path"), u, md)
	} else {
		var e uploadedEntry
		e, err = writeUpload(q.Get("path"), body, u, md)
		written = []uploadedEntry{e}
	}
	if err != nil {
		writeHTTPError(w, err)
		return
	}
	failpoint.GuestAfterWrite.Hit()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}

// writeMultipart writes every "file" part. With a path query there must be
// one file part; without, each part's filename (directories included) names
// its destination, relative to the user's home unless absolute.
// Each file gets the metadata md.
func (d *Daemon) writeMultipart(mr *multipart.Reader, queryPath string, u caller, md map[string]string) ([]uploadedEntry, error) {
	if mr == nil {
		return nil, fmt.Errorf("multipart body without boundary: %w", errBadRequest)
	}
	var out []uploadedEntry
	for parts := 0; ; parts++ {
		if parts >= maxUploadParts {
			return out, fmt.Errorf("more than %d multipart parts: %w", maxUploadParts, errBadRequest)
		}
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("read multipart body: %v: %w", err, errBadRequest)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		dest := queryPath
		if dest == "" {
			dest = partFilename(part.Header.Get("Content-Disposition"))
		} else if len(out) > 0 {
			return out, fmt.Errorf("path query names one file but the body has several file parts: %w", errBadRequest)
		}
		e, err := writeUpload(dest, part, u, md)
		part.Close()
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("multipart body has no part named file: %w", errBadRequest)
	}
	return out, nil
}

// partFilename returns the filename parameter of a Content-Disposition
// header with its directories, which multipart.Part.FileName strips.
func partFilename(disposition string) string {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return ""
	}
	return params["filename"]
}

// writeUpload streams src into the file at dest (resolved for u), creating
// parent directories owned by u and replacing the file's content.
//
// The bytes go to a temporary file beside the destination, renamed over it
// only once the whole body has arrived: an upload cut short (the client gone,
// the body's end missing, the disk full) leaves the previous file as it was
// and no partial file behind. The replacement keeps the old file's
// permission bits; a destination that is a symbolic link has its target
// replaced, as writing through it would. Hard links to the old file keep the
// old content. The new file's user.e2b.* extended attributes are md and
// only md (envd's metadata), set before it is renamed into place.
func writeUpload(dest string, src io.Reader, u caller, md map[string]string) (uploadedEntry, error) {
	if dest == "" {
		return uploadedEntry{}, fmt.Errorf("no destination: give the path query or a part filename: %w", errBadRequest)
	}
	p, err := u.resolve(dest)
	if err != nil {
		return uploadedEntry{}, err
	}
	perm := os.FileMode(0o644)
	target := p
	replacing := false
	if fi, err := os.Stat(p); err == nil {
		if !fi.Mode().IsRegular() {
			return uploadedEntry{}, fmt.Errorf("write %s: exists and is not a regular file: %w", p, errBadRequest)
		}
		perm = fi.Mode().Perm()
		replacing = fi.Size() > 0
		if target, err = filepath.EvalSymlinks(p); err != nil {
			return uploadedEntry{}, fmt.Errorf("write %s: %w", p, err)
		}
	}
	if err := makeDirs(path.Dir(target), u.account); err != nil {
		return uploadedEntry{}, err
	}
	f, err := os.CreateTemp(path.Dir(target), "."+path.Base(target)+".upload-*")
	if err != nil {
		return uploadedEntry{}, fmt.Errorf("open %s for writing: %w", p, err)
	}
	tmp := f.Name()
	dst := io.Writer(f)
	if replacing {
		dst = &writebackAhead{f: f, fd: int(f.Fd())}
	}
	_, copyErr := copyLarge(dst, src)
	if copyErr == nil {
		copyErr = f.Chmod(perm)
	}
	if copyErr == nil && len(md) > 0 {
		copyErr = setMetadata(int(f.Fd()), p, md)
	}
	closeErr := f.Close()
	if copyErr == nil {
		copyErr = closeErr
	}
	if copyErr == nil {
		copyErr = chownTo(tmp, u.account)
	}
	if copyErr == nil {
		copyErr = os.Rename(tmp, target)
	}
	if copyErr != nil {
		_ = os.Remove(tmp)
		return uploadedEntry{}, fmt.Errorf("write %s (the previous content, if any, is kept): %w", p, copyErr)
	}
	return uploadedEntry{Path: p, Name: path.Base(p), Type: "file", Metadata: md}, nil
}

// writeHTTPError answers err as envd does: a JSON {code, message} body.
func writeHTTPError(w http.ResponseWriter, err error) {
	status := httpStatus(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": err.Error()})
}

// copyBufferSize is the buffer files are streamed with. HTTP/2 hands every
// Write of a handler to the connection's writer goroutine and reads come
// out of the stream's flow-control window: io.Copy's 32 KiB makes a
// 100 MiB file 3,200 hand-offs and file system calls, 256 KiB makes it 400.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// copyLarge is io.Copy with a copyBufferSize buffer, whatever dst and src
// implement.
func copyLarge(dst io.Writer, src io.Reader) (int64, error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// bigWriter is a ResponseWriter that copies what is read into it with a
// copyBufferSize buffer (http.ServeContent copies with io.Copy).
type bigWriter struct{ http.ResponseWriter }

func (w *bigWriter) ReadFrom(r io.Reader) (int64, error) {
	return copyLarge(w.ResponseWriter, r)
}

// writebackChunk is how much of an upload that replaces a file is written
// before the kernel is asked to start writing it back.
const writebackChunk = 8 << 20

// writebackAhead writes an upload that replaces a non-empty file and starts
// the writeback of every writebackChunk as soon as it is written
// (sync_file_range(2) SYNC_FILE_RANGE_WRITE: start, do not wait). A rename
// over a non-empty file makes btrfs (and ext4's auto_da_alloc) start the
// writeback of the whole new file inside rename(2), while the upload's
// answer waits; started here, that writeback overlaps the rest of the body
// arriving and the rename has at most the last chunk left to start. What
// reaches the disk, and when the rename makes the file visible, are as
// without it. A file system that cannot (EINVAL, ENOSYS, EOPNOTSUPP,
// ESPIPE) is written as before; an I/O error fails the upload.
type writebackAhead struct {
	f       *os.File
	fd      int
	written int64
	started int64
	off     bool
}

func (w *writebackAhead) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if err != nil || w.off || w.written-w.started < writebackChunk {
		return n, err
	}
	switch err := unix.SyncFileRange(w.fd, w.started, w.written-w.started, unix.SYNC_FILE_RANGE_WRITE); {
	case err == nil:
		w.started = w.written
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ESPIPE):
		w.off = true
	default:
		return n, fmt.Errorf("start writeback of bytes %d-%d: %w", w.started, w.written, err)
	}
	return n, nil
}
