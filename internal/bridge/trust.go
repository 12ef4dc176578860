package bridge

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
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

func (b *Bridge) installTrust(ctx context.Context, cert []byte) error {
	if err := b.writeGuestFile(ctx, TrustAnchorPath, cert); err != nil {
		return err
	}
	bundle, err := b.readGuestFile(ctx, TrustBundlePath)
	if err != nil {
		return err
	}
	if bytes.Contains(bundle, cert) {
		return nil
	}
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	return b.writeGuestFile(ctx, TrustBundlePath, append(bundle, cert...))
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

// writeGuestFile writes a file as the guest's root, creating its directories.
func (b *Bridge) writeGuestFile(ctx context.Context, p string, data []byte) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, guestFileURL(p), bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := b.client.HTTPClient().Do(req)
	if err != nil {
		return fmt.Errorf("write %s in the guest: %w", p, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("write %s in the guest: HTTP %d %s", p, resp.StatusCode, msg)
	}
	return nil
}
