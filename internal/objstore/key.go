package objstore

import (
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Key limits. MaxKeyLen is S3's 1024-byte name limit less room for a
// driver's own prefix and suffix (s3store stores key k as "prefix/k@");
// MaxSegmentLen leaves room under a filesystem's 255-byte name limit for a
// driver's own suffixes.
const (
	MaxKeyLen     = 768
	MaxSegmentLen = 200
)

// ValidKey checks that key may name an object: 1 to MaxKeyLen bytes of
// [a-z0-9._/-], made of "/"-separated segments that are each 1 to
// MaxSegmentLen bytes and start with a letter or digit. So a key never starts
// or ends with "/", never holds "//", ".", ".." or a hidden segment (drivers
// keep their own files under names starting with "."), and maps onto a
// relative path and onto an S3 key unchanged. The error is ErrInvalidArgument.
func ValidKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("object key %.64q: want 1 to %d bytes: %w", key, MaxKeyLen, errdefs.ErrInvalidArgument)
	}
	for i, c := range []byte(key) {
		if !keyByte(c) {
			return fmt.Errorf("object key %.64q: byte %d (%q) is outside [a-z0-9._/-]: %w", key, i, c, errdefs.ErrInvalidArgument)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" {
			return fmt.Errorf("object key %.64q: empty segment (leading, trailing or double slash): %w", key, errdefs.ErrInvalidArgument)
		}
		if len(seg) > MaxSegmentLen {
			return fmt.Errorf("object key %.64q: segment longer than %d bytes: %w", key, MaxSegmentLen, errdefs.ErrInvalidArgument)
		}
		if c := seg[0]; c == '.' || c == '_' || c == '-' {
			return fmt.Errorf("object key %.64q: segment %.64q must start with a letter or digit: %w", key, seg, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// ValidPrefix checks a List prefix: empty, a valid key, or a valid key
// followed by "/". The error is ErrInvalidArgument.
func ValidPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return fmt.Errorf("list prefix: %w", err)
	}
	return nil
}

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/'
}
