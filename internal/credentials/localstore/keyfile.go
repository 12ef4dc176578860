package localstore

import (
	"errors"
	"fmt"
	"os"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// KeyLen is the AES-256 key's length in bytes; the key file holds it as 64
// hex digits and an optional newline.
const KeyLen = seal.KeyLen

// GenerateKeyFile writes a fresh random key to path, mode 0600. It refuses to
// replace an existing file (ErrConflict).
func GenerateKeyFile(path string) error { return seal.CreateKeyFile(path) }

// readKeyFile reads and parses the key at path: a regular file, not a link,
// readable by its owner only.
func readKeyFile(path string) ([]byte, error) {
	key, err := seal.ReadKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("key file %s does not exist; create one with GenerateKeyFile: %w", path, errdefs.ErrFailedPrecondition)
	}
	return key, err
}
