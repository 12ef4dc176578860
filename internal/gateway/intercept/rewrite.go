package intercept

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) that are not
// forwarded either way, besides those a Connection header names.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers from h. "TE: trailers"
// survives, as net/http/httputil's ReverseProxy lets it.
func removeHopByHop(h http.Header) {
	teTrailers := httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	if teTrailers {
		h["Te"] = []string{"trailers"}
	}
}

// outgoing builds the request sent upstream from the guest's req: origin
// form, hop-by-hop headers, Expect and trailers removed, cred (if any)
// added. It
// zeroes cred. The body is req's, unread.
func outgoing(req *http.Request, cred *credentials.Credential) (*http.Request, error) {
	if cred != nil {
		defer cred.Zero()
	}
	out := &http.Request{
		Method: req.Method,
		URL: &url.URL{
			Path: req.URL.Path, RawPath: req.URL.RawPath,
			RawQuery: req.URL.RawQuery, ForceQuery: req.URL.ForceQuery,
		},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:           req.Header.Clone(),
		Body:             req.Body,
		ContentLength:    req.ContentLength,
		TransferEncoding: req.TransferEncoding,
		Host:             req.Host,
		// Request trailers are read with the body and dropped: they are
		// all but unused, and a trailer could otherwise restate the
		// header that carries the credential after it was set.
	}
	if out.Header == nil {
		out.Header = make(http.Header)
	}
	removeHopByHop(out.Header)
	delete(out.Header, "Expect")
	delete(out.Header, "Host") // Request.Write sends out.Host
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // keeps Request.Write from adding Go's
	}
	if cred == nil {
		return out, nil
	}
	if err := inject(out, cred); err != nil {
		return nil, err
	}
	// The response is scanned for the secret (see redact.go): ask for it
	// uncompressed, and whole, since a secret cut across the parts of
	// range requests would be found in none of them.
	setHeader(out.Header, "Accept-Encoding", "identity")
	deleteHeader(out.Header, "Range")
	deleteHeader(out.Header, "If-Range")
	return out, nil
}

// credentialHeaders are headers that carry a credential of their own: the
// Authorization schemes and the API-key headers in common use. A request
// to a host the gateway adds a credential for may not carry one of these
// besides the one the credential sets: the upstream could prefer it, and
// the sandbox would reach the host under an account of its choosing
// (data sent to an allowed API under an attacker's key is carried out).
var credentialHeaders = []string{
	"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "X-Auth-Token",
	"X-Access-Token", "Private-Token", "X-Amz-Security-Token",
}

// ownCredential returns the name of a header of h that carries a
// credential other than the one inj sets, or "".
func ownCredential(h http.Header, inj credentials.Injection) string {
	var set []string
	switch inj.Method {
	case credentials.MethodHeader:
		set = []string{inj.Name}
	case credentials.MethodBasic:
		set = []string{"Authorization"}
	case credentials.MethodHeaders:
		set = strings.Split(inj.Name, ",")
	}
	for k := range h {
		if slices.ContainsFunc(set, func(s string) bool { return strings.EqualFold(k, s) }) {
			continue
		}
		for _, c := range credentialHeaders {
			if strings.EqualFold(k, c) {
				return c
			}
		}
	}
	return ""
}

// inject adds cred's secret to out as its Injection says, replacing
// whatever the guest sent in the same place. Errors never contain the
// secret.
func inject(out *http.Request, cred *credentials.Credential) error {
	name := cred.Injection.Name
	switch cred.Injection.Method {
	case credentials.MethodHeader:
		if !httpguts.ValidHeaderFieldName(name) || reservedHeader(name) {
			return fmt.Errorf("credential %s: header %.64q cannot carry a credential: %w", cred.ID, name, errdefs.ErrFailedPrecondition)
		}
		v := string(cred.Secret)
		if !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("credential %s: secret is not a valid header value: %w", cred.ID, errdefs.ErrFailedPrecondition)
		}
		setHeader(out.Header, name, v)
	case credentials.MethodBasic:
		setHeader(out.Header, "Authorization", "Basic "+base64.StdEncoding.EncodeToString(cred.Secret))
	case credentials.MethodHeaders:
		names, values, err := cred.InjectedHeaders()
		if err != nil {
			return fmt.Errorf("credential %s: %w", cred.ID, errors.Join(err, errdefs.ErrFailedPrecondition))
		}
		// Every header is checked before any is set: a request carries
		// all of them or is refused.
		for i, n := range names {
			if !httpguts.ValidHeaderFieldName(n) || reservedHeader(n) {
				return fmt.Errorf("credential %s: header %.64q cannot carry a credential: %w", cred.ID, n, errdefs.ErrFailedPrecondition)
			}
			if !httpguts.ValidHeaderFieldValue(string(values[i])) {
				return fmt.Errorf("credential %s: the value of header %.64q is not a valid header value: %w", cred.ID, n, errdefs.ErrFailedPrecondition)
			}
		}
		for i, n := range names {
			setHeader(out.Header, n, string(values[i]))
		}
	case credentials.MethodQuery:
		if name == "" {
			return fmt.Errorf("credential %s: empty query parameter name: %w", cred.ID, errdefs.ErrFailedPrecondition)
		}
		out.URL.RawQuery = setQueryParam(out.URL.RawQuery, name, string(cred.Secret))
		out.URL.ForceQuery = false
	default:
		return fmt.Errorf("credential %s: injection method %.32q: %w", cred.ID, cred.Injection.Method, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// reservedHeader reports whether a header frames or routes the request, so
// a credential may not be put in it (credentials.Credential.Validate says
// the same; this guards other CredentialSources).
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te",
		"Trailer", "Keep-Alive", "Proxy-Connection", "Expect":
		return true
	}
	return false
}

// setHeader sets h[name] to the single value v, deleting every key that
// differs from name only in case.
func setHeader(h http.Header, name, v string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
	h.Set(name, v)
}

// deleteHeader deletes every key of h equal to name but for case.
func deleteHeader(h http.Header, name string) {
	for k := range h {
		if strings.EqualFold(k, name) {
			delete(h, k)
		}
	}
}

// setQueryParam returns rawQuery with every name parameter removed and
// name=value appended; the other parameters keep their bytes and order.
func setQueryParam(rawQuery, name, value string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		key, _, _ := strings.Cut(part, "=")
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if key == name {
			continue
		}
		b.WriteString(part)
		b.WriteByte('&')
	}
	b.WriteString(url.QueryEscape(name))
	b.WriteByte('=')
	b.WriteString(url.QueryEscape(value))
	return b.String()
}
