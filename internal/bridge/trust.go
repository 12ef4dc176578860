package bridge

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/guest"
)

// Where the guest finds the sandbox's interception CA: Debian's
// update-ca-certificates picks up the first on its next run, and the system
// bundle (read by OpenSSL, curl, Go, Python's ssl) gets it appended now.
const (
	TrustAnchorPath = "/usr/local/share/ca-certificates/space-sandbox-ca.crt"
	TrustBundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// maxBundle bounds the system bundle the bridge reads back.
	maxBundle = 8 << 20
)

// TrustRequest is the body of POST /bridge/v1/trust: a CA certificate for
// the guest to trust.
type TrustRequest struct {
	CertPEM string `json:"cert_pem"`
}

// handleTrust installs a CA certificate into the guest's trust store (as the
// guest's root, through the guest daemon's file API). Installing the same
// certificate again changes nothing.
func (b *Bridge) handleTrust(w http.ResponseWriter, r *http.Request) {
	var req TrustRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "trust: bad body: "+err.Error())
		return
	}
	cert, err := onePEMCertificate(req.CertPEM)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "trust: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if err := b.installTrust(ctx, cert); err != nil {
		writeJSONError(w, http.StatusBadGateway, "trust: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func onePEMCertificate(s string) ([]byte, error) {
	blk, rest := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("want exactly one PEM certificate")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if !c.IsCA {
		return nil, fmt.Errorf("the certificate is not a CA")
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), nil
}

// prefetchedBundle is the guest's system bundle as it was read before the
// execution had an identity (POST /bridge/v1/trust/prefetch: the warm
// pool's preparation), so that the trust of its claim writes without a read
// first. Nobody but the node has reached the guest then, so what was read
// is what is there; the first trust takes it, and every later one reads
// the guest again.
type prefetchedBundle struct {
	mu     sync.Mutex // guards the rest
	bundle []byte
	ok     bool
}

// take returns the prefetched bundle once.
func (p *prefetchedBundle) take() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.bundle, p.ok
	p.bundle, p.ok = nil, false
	return b, ok
}

// handleTrustPrefetch reads the guest's system bundle for the next trust
// (POST /bridge/v1/trust/prefetch). It is refused once an identity is
// installed: from then on the guest's files are the sandbox's to change.
func (b *Bridge) handleTrustPrefetch(w http.ResponseWriter, r *http.Request) {
	if b.adm.identity() != nil {
		writeJSONError(w, http.StatusConflict, "trust prefetch: the execution has an identity; the guest's files are its sandbox's")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	bundle, err := b.readGuestFile(ctx, TrustBundlePath)
	if err != nil {
		writeJSONError(w, http.StatusBadGateway, "trust prefetch: "+err.Error())
		return
	}
	b.prefetched.mu.Lock()
	b.prefetched.bundle, b.prefetched.ok = bundle, true
	b.prefetched.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// installTrust writes the anchor and the bundle with cert appended in one
// guest request, reading the bundle first unless it was prefetched.
func (b *Bridge) installTrust(ctx context.Context, cert []byte) error {
	bundle, ok := b.prefetched.take()
	if !ok {
		var err error
		if bundle, err = b.readGuestFile(ctx, TrustBundlePath); err != nil {
			return err
		}
	}
	files := []guestFile{{TrustAnchorPath, cert}}
	if !bytes.Contains(bundle, cert) {
		if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
			bundle = append(bundle, '\n')
		}
		files = append(files, guestFile{TrustBundlePath, append(bundle, cert...)})
	}
	return b.writeGuestFiles(ctx, files)
}

func guestFileURL(p string) string {
	return guest.BaseURL + "/files?" + url.Values{"path": {p}, "username": {"root"}}.Encode()
}

// readGuestFile reads a file as the guest's root; a missing file reads empty.
func (b *Bridge) readGuestFile(ctx context.Context, p string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, guestFileURL(p), nil)
	resp, err := b.client.HTTPClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s in the guest: %w", p, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("read %s in the guest: HTTP %d %s", p, resp.StatusCode, msg)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBundle+1))
	if err != nil {
		return nil, fmt.Errorf("read %s in the guest: %w", p, err)
	}
	if len(data) > maxBundle {
		return nil, fmt.Errorf("%s in the guest is over %d bytes", p, maxBundle)
	}
	return data, nil
}

// guestFile is a file to write in the guest: its absolute path and content.
type guestFile struct {
	path string
	data []byte
}

// writeGuestFiles writes files in order as the guest's root, creating their
// directories, in one request (a multipart upload whose part file names are
// the absolute paths). Each file is replaced whole or kept as it was.
func (b *Bridge) writeGuestFiles(ctx context.Context, files []guestFile) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": f.path}))
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			return fmt.Errorf("write %s in the guest: %w", f.path, err)
		}
		_, _ = pw.Write(f.data)
	}
	if err := mw.Close(); err != nil {
		return fmt.Errorf("write files in the guest: %w", err)
	}
	target := guest.BaseURL + "/files?" + url.Values{"username": {"root"}}.Encode()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := b.client.HTTPClient().Do(req)
	if err != nil {
		return fmt.Errorf("write %s in the guest: %w", files[0].path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("write %s in the guest: HTTP %d %s", files[0].path, resp.StatusCode, msg)
	}
	return nil
}
