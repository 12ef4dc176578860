package credentials

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
)

// validID checks an identifier: 1 to MaxIDLen bytes of [A-Za-z0-9._-].
func validID(what, s string) error {
	if len(s) == 0 || len(s) > MaxIDLen {
		return fmt.Errorf("%s %.64q: want 1 to %d bytes: %w", what, s, MaxIDLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%s %.64q: byte %d not in [A-Za-z0-9._-]: %w", what, s, i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// validName checks a label: 1 to MaxIDLen printable ASCII bytes.
func validName(s string) error {
	if len(s) == 0 || len(s) > MaxIDLen {
		return fmt.Errorf("name %.64q: want 1 to %d bytes: %w", s, MaxIDLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("name %.64q: byte %d is not printable ASCII: %w", s, i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// forbiddenHeaders are headers a credential may not set: they frame or
// route the request, and the gateway owns them.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Expect": true,
}

// validSecret checks the secret against the injection method. Errors never
// contain the secret.
func (c Credential) validSecret() error {
	if len(c.Secret) < MinSecretLen || len(c.Secret) > MaxSecretLen {
		return fmt.Errorf("secret of %d bytes, want %d to %d (the gateway redacts it from responses, and a shorter one would match ordinary text): %w",
			len(c.Secret), MinSecretLen, MaxSecretLen, errdefs.ErrInvalidArgument)
	}
	inj := c.Injection
	switch inj.Method {
	case MethodHeader:
		if len(inj.Name) == 0 || len(inj.Name) > maxInjectionName || !isToken(inj.Name) {
			return fmt.Errorf("header name %.64q: want 1 to %d token characters: %w", inj.Name, maxInjectionName, errdefs.ErrInvalidArgument)
		}
		if forbiddenHeaders[http.CanonicalHeaderKey(inj.Name)] {
			return fmt.Errorf("header %s frames the request and cannot carry a credential: %w", inj.Name, errdefs.ErrInvalidArgument)
		}
	case MethodBasic:
		if inj.Name != "" {
			return fmt.Errorf("basic injection takes no name (got %.64q): %w", inj.Name, errdefs.ErrInvalidArgument)
		}
		if !bytes.Contains(c.Secret, []byte(":")) {
			return fmt.Errorf("basic injection needs a secret of the form user:password (no colon found): %w", errdefs.ErrInvalidArgument)
		}
	case MethodQuery:
		if len(inj.Name) == 0 || len(inj.Name) > maxInjectionName || !isToken(inj.Name) {
			return fmt.Errorf("query parameter name %.64q: want 1 to %d token characters: %w", inj.Name, maxInjectionName, errdefs.ErrInvalidArgument)
		}
	case MethodHeaders:
		return c.validHeaders()
	default:
		return fmt.Errorf("injection method %.32q: want %s, %s, %s or %s: %w",
			inj.Method, MethodHeader, MethodBasic, MethodQuery, MethodHeaders, errdefs.ErrInvalidArgument)
	}
	if inj.Method != MethodQuery {
		// A header value may not contain control characters other than tab:
		// CR or LF would let the secret inject headers of its own.
		for _, b := range c.Secret {
			if b < 0x20 && b != '\t' || b == 0x7f {
				return fmt.Errorf("secret contains a control character, not allowed in an HTTP header: %w", errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// validHeaders checks a MethodHeaders credential: 2 to MaxInjectedHeaders
// distinct header names a credential may set, each with a value of at
// least MinSecretLen bytes (each is redacted on its own) and no control
// character but tab. Errors never contain a value.
func (c Credential) validHeaders() error {
	names, values, err := c.InjectedHeaders()
	if err != nil {
		return err
	}
	if len(names) < 2 || len(names) > MaxInjectedHeaders {
		return fmt.Errorf("%d headers, want 2 to %d (one header: method %s): %w", len(names), MaxInjectedHeaders, MethodHeader, errdefs.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		if len(name) == 0 || len(name) > maxInjectionName || !isToken(name) {
			return fmt.Errorf("header name %.64q: want 1 to %d token characters: %w", name, maxInjectionName, errdefs.ErrInvalidArgument)
		}
		canon := http.CanonicalHeaderKey(name)
		if forbiddenHeaders[canon] {
			return fmt.Errorf("header %s frames the request and cannot carry a credential: %w", name, errdefs.ErrInvalidArgument)
		}
		if seen[canon] {
			return fmt.Errorf("header %s is named twice: %w", name, errdefs.ErrInvalidArgument)
		}
		seen[canon] = true
		if len(values[i]) < MinSecretLen {
			return fmt.Errorf("header %s: a value of %d bytes, fewer than %d (the gateway redacts each value from responses, and a shorter one would match ordinary text): %w",
				name, len(values[i]), MinSecretLen, errdefs.ErrInvalidArgument)
		}
		for _, b := range values[i] {
			if b < 0x20 && b != '\t' || b == 0x7f {
				return fmt.Errorf("header %s: the value contains a control character, not allowed in an HTTP header: %w", name, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !ok {
			switch c {
			case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
