package e2bapi

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/template"
)

// A Template's COPY sources arrive as a (gzip) tar the SDK PUTs to the
// url that GET /templates/{templateID}/files/{hash} answers. SPACE keeps
// each upload in FilesDir under its tenant's directory, named by the
// filesHash the SDK computed: content-addressed per tenant, so a tenant's
// uploads serve only its own builds and one tenant can never place content
// under another's hash.
//
// The hash is a name, not a proof: the SDKs' calculateFilesHash covers
// the COPY's destination (which the upload does not carry) and each
// entry's stat mode and size on the client's filesystem (a directory's
// size is the filesystem's, absent from a tar), so the server cannot
// recompute it from the tar. A tenant can at worst mislabel its own
// upload; what a build copies is always what that tenant uploaded.
//
// The upload url carries a MAC (under TokenKey) of the tenant, the hash
// and an expiry instead of an API key: the SDKs PUT it without their key,
// with the headers the answer gives. An upload is bounded in size
// (MaxUploadBytes) and refused unless every entry passes checkArchive;
// at build time it is extracted with template.Extract's hostile-archive
// rules. A tenant's uploads are bounded in count, bytes and age
// (tplquota.go).

// filesLabel separates the upload MAC from any other under the same key.
const filesLabel = "space e2b template files v1\x00"

// uploadValidity is how long an upload url works.
const uploadValidity = time.Hour

// uploadSig is the MAC of an upload url.
func (a *API) uploadSig(tenant, hash string, expires int64) string {
	return a.e2bMAC(filesLabel, tenant+"\x00"+hash+"\x00"+strconv.FormatInt(expires, 10))
}

// uploadPath is the path of hash's upload url for tenant.
func (a *API) uploadPath(tenant, hash string, now time.Time) string {
	exp := now.Add(uploadValidity).Unix()
	return fmt.Sprintf("%s/template-files/%s/%s?expires=%d&sig=%s", PathPrefix, hex.EncodeToString([]byte(tenant)), hash, exp, a.uploadSig(tenant, hash, exp))
}

// filesPath is where tenant's upload hash is kept.
func (a *API) filesPath(tenant, hash string) string {
	return filepath.Join(a.filesDir, hex.EncodeToString([]byte(tenant)), hash)
}

// handleTemplateFiles serves GET /templates/{templateID}/files/{hash}:
// whether the caller's upload hash is kept, and where to PUT it.
func (a *API) handleTemplateFiles(w http.ResponseWriter, r *http.Request) {
	c := a.host.Caller(r.Context())
	if _, err := a.builds.get(r.Context(), c.Tenant, r.PathValue("templateID"), ""); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	hash := r.PathValue("hash")
	if !validFilesHash(hash) {
		a.writeE2BErr(w, r, fmt.Errorf("%w: files hash %q: want 64 hex digits", errdefs.ErrInvalidArgument, service.Clip(hash)))
		return
	}
	if a.filesDir == "" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: this server keeps no template files (no files directory configured)", errdefs.ErrUnavailable))
		return
	}
	_, err := os.Stat(a.filesPath(c.Tenant, hash))
	present := err == nil
	if present {
		// The build that asks will use it: it must not expire first.
		touch(a.filesPath(c.Tenant, hash), time.Now())
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"present": present,
		"url":     a.baseURL(r) + a.uploadPath(c.Tenant, hash, time.Now()),
		"headers": map[string]string{},
	})
}

// handleTemplateFilesPut serves PUT /template-files/{tenant}/{hash}: an
// upload, authorized by its url's MAC.
func (a *API) handleTemplateFilesPut(w http.ResponseWriter, r *http.Request) {
	tb, err := hex.DecodeString(r.PathValue("tenant"))
	tenant, hash := string(tb), r.PathValue("hash")
	exp, perr := strconv.ParseInt(r.URL.Query().Get("expires"), 10, 64)
	if err != nil || perr != nil || !validFilesHash(hash) || time.Now().Unix() > exp ||
		!macEqual(r.URL.Query().Get("sig"), a.uploadSig(tenant, hash, exp)) {
		writeE2BError(w, http.StatusUnauthorized, "upload url invalid or expired: ask GET /templates/{templateID}/files/{hash} for a new one")
		return
	}
	if a.filesDir == "" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: this server keeps no template files", errdefs.ErrUnavailable))
		return
	}
	if r.ContentLength > a.maxUpload {
		a.writeE2BErr(w, r, &tooLargeError{limit: a.maxUpload, err: &http.MaxBytesError{Limit: a.maxUpload}})
		return
	}
	body := http.MaxBytesReader(w, r.Body, a.maxUpload)
	if err := a.storeUpload(r.Context(), tenant, hash, body); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			err = &tooLargeError{limit: a.maxUpload, err: mb}
		}
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// storeUpload checks and keeps tenant's upload hash: written to a
// temporary file, checked with checkArchive, then renamed into place.
func (a *API) storeUpload(ctx context.Context, tenant, hash string, body io.Reader) error {
	dir := filepath.Dir(a.filesPath(tenant, hash))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, body)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err == nil {
		err = checkArchive(ctx, f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("upload %s: %w", hash, err)
	}
	return a.uploads.keep(a.filesDir, dir, f.Name(), a.filesPath(tenant, hash), time.Now())
}

// openArchive is r's tar stream, gunzipped when it is gzip.
func openArchive(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", errdefs.ErrInvalidArgument, err)
		}
		return zr, nil
	}
	return br, nil
}

// uploadLimits bound what one upload unpacks to.
var uploadLimits = template.Limits{MaxBytes: 16 << 30, MaxEntries: 1 << 20}

// checkArchive refuses an upload that is not a tar (gzip or not) whose
// every entry stays in the file context: no absolute name and no ".."
// (template.Extract refuses those too), no symlink whose target is
// absolute or climbs out of the archive's root (the SDKs' resolveSymlinks
// option uploads the file instead), no hard link out of it, only files,
// directories and links, and at most uploadLimits.
func checkArchive(ctx context.Context, r io.Reader) error {
	ar, err := openArchive(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(ar)
	var total int64
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: archive entry %d: %v", errdefs.ErrInvalidArgument, n, err)
		}
		if n >= uploadLimits.MaxEntries {
			return fmt.Errorf("archive: more than %d entries: %w", uploadLimits.MaxEntries, errdefs.ErrResourceExhausted)
		}
		if total += hdr.Size; hdr.Size < 0 || total > uploadLimits.MaxBytes {
			return fmt.Errorf("archive: more than %d bytes of files: %w", uploadLimits.MaxBytes, errdefs.ErrResourceExhausted)
		}
		if err := checkEntry(hdr); err != nil {
			return fmt.Errorf("%w: archive entry %q: %v", errdefs.ErrInvalidArgument, service.Clip(hdr.Name), err)
		}
	}
}

// checkEntry is checkArchive's rule for one entry.
func checkEntry(hdr *tar.Header) error {
	if escapes(".", hdr.Name) {
		return errors.New("absolute or leaves the file context")
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir:
	case tar.TypeSymlink:
		if escapes(path.Dir(path.Clean(strings.TrimPrefix(hdr.Name, "./"))), hdr.Linkname) {
			return fmt.Errorf("symlink to %q points out of the file context; copy with resolveSymlinks: true to upload what it points to", service.Clip(hdr.Linkname))
		}
	case tar.TypeLink:
		if escapes(".", hdr.Linkname) {
			return fmt.Errorf("hard link to %q points out of the file context", service.Clip(hdr.Linkname))
		}
	case tar.TypeXGlobalHeader:
	default:
		return fmt.Errorf("type %q: only files, directories and links are copied", hdr.Typeflag)
	}
	return nil
}

// escapes reports whether name, read from directory dir of the archive's
// root, is absolute or leaves the root.
func escapes(dir, name string) bool {
	if name == "" || path.IsAbs(name) || strings.IndexByte(name, 0) >= 0 {
		return true
	}
	p := path.Join(dir, name)
	return p == ".." || strings.HasPrefix(p, "../")
}

// extractUpload unpacks tenant's upload hash into dir under
// template.Extract's rules.
func (a *API) extractUpload(ctx context.Context, tenant, hash, dir string) error {
	touch(a.filesPath(tenant, hash), time.Now())
	f, err := os.Open(a.filesPath(tenant, hash))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: files %s were not uploaded (GET /templates/{templateID}/files/{hash} answers where to)", errdefs.ErrInvalidArgument, hash)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ar, err := openArchive(f)
	if err != nil {
		return err
	}
	return template.Extract(ctx, ar, dir, uploadLimits)
}

// baseURL is where clients reach the API: the configured PublicURL, else
// the request's scheme and Host header.
func (a *API) baseURL(r *http.Request) string {
	if a.publicURL != "" {
		return a.publicURL
	}
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// ParsePublicURL checks a public URL for Config.PublicURL: http or https,
// a host, no path (but "/"), query, fragment or user; it returns it
// without a trailing "/".
func ParsePublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("public url %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return "", fmt.Errorf("public url %q: want http(s)://HOST[:PORT] with no path, query or user, like https://space.example.com", s)
	}
	return u.Scheme + "://" + u.Host, nil
}
