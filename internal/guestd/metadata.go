package guestd

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// envd's file metadata: an upload's X-Metadata-<key>: <value> headers
// become the written file's user.e2b.<key> extended attributes, replacing
// whatever metadata the file had (the upload writes a new file).

// metadataHeaderPrefix starts the headers of an upload's metadata.
const metadataHeaderPrefix = "X-Metadata-"

// Bounds of one file's metadata: a key fits an xattr name (255 bytes with
// the user.e2b. prefix), and names and values together fit what
// readMetadata reads back (its 4096-byte buffers).
const (
	maxMetadataKey   = 255 - len(metadataXattrPrefix)
	maxMetadataBytes = 4096
)

// parseMetadataHeaders reads an upload's metadata from h. Keys are
// lowercased: header names are case-insensitive, and HTTP/2 delivers them
// in lower case. A key must be an HTTP token, a value printable US-ASCII
// (what the SDKs check before sending); a header given twice, or metadata
// over the bounds, is refused.
func parseMetadataHeaders(h http.Header) (map[string]string, error) {
	var md map[string]string
	total := 0
	for name, vals := range h {
		if len(name) < len(metadataHeaderPrefix) || !strings.EqualFold(name[:len(metadataHeaderPrefix)], metadataHeaderPrefix) {
			continue
		}
		key := strings.ToLower(name[len(metadataHeaderPrefix):])
		switch {
		case key == "":
			return nil, fmt.Errorf("metadata header %q names no key (want %s<key>: <value>): %w", name, metadataHeaderPrefix, errBadRequest)
		case len(key) > maxMetadataKey:
			return nil, fmt.Errorf("metadata key %.40q… is %d bytes, over %d: %w", key, len(key), maxMetadataKey, errBadRequest)
		case !isToken(key):
			return nil, fmt.Errorf("metadata key %q: use only letters, digits and !#$%%&'*+-.^_`|~: %w", key, errBadRequest)
		case len(vals) != 1:
			return nil, fmt.Errorf("metadata key %q is given %d times; give it once: %w", key, len(vals), errBadRequest)
		case !isPrintableASCII(vals[0]):
			return nil, fmt.Errorf("metadata value of %q: want printable US-ASCII: %w", key, errBadRequest)
		}
		if _, dup := md[key]; dup {
			return nil, fmt.Errorf("metadata key %q is given twice (header names differ only in case); give it once: %w", key, errBadRequest)
		}
		total += len(metadataXattrPrefix) + len(key) + 1 + len(vals[0])
		if total > maxMetadataBytes {
			return nil, fmt.Errorf("metadata is over %d bytes (keys with the %s prefix, and values): %w", maxMetadataBytes, metadataXattrPrefix, errBadRequest)
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vals[0]
	}
	return md, nil
}

// setMetadata sets md as the user.e2b.* extended attributes of the open
// file fd (a fresh upload: it has none yet), in key order.
func setMetadata(fd int, p string, md map[string]string) error {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := unix.Fsetxattr(fd, metadataXattrPrefix+k, []byte(md[k]), 0); err != nil {
			return fmt.Errorf("set metadata %q of %s (the file system must support user extended attributes): %w", k, p, err)
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110 tchar).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return s != ""
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
