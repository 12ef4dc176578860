package kms_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
)

func TestErrorClasses(t *testing.T) {
	revoked := fmt.Errorf("restore: %w", &kms.KeyRevokedError{KeyID: "kek-1"})
	if !errors.Is(revoked, kms.ErrKeyRevoked) || !errdefs.IsFailedPrecondition(revoked) || errdefs.IsNotFound(revoked) {
		t.Errorf("revoked error classes wrong: %v", revoked)
	}
	if want := "tenant key kek-1 was revoked: the data encrypted with it cannot be decrypted"; !strings.HasSuffix(revoked.Error(), want) {
		t.Errorf("revoked message = %q", revoked.Error())
	}
	var re *kms.KeyRevokedError
	if !errors.As(revoked, &re) || re.KeyID != "kek-1" {
		t.Errorf("errors.As did not find the key id")
	}
	missing := fmt.Errorf("restore: %w", &kms.KeyNotFoundError{KeyID: "kek-2"})
	if !errors.Is(missing, kms.ErrKeyNotFound) || !errdefs.IsNotFound(missing) || errors.Is(missing, kms.ErrKeyRevoked) {
		t.Errorf("missing error classes wrong: %v", missing)
	}
	if !errdefs.IsFailedPrecondition(kms.ErrInvalidWrappedKey) {
		t.Errorf("ErrInvalidWrappedKey is not FailedPrecondition")
	}
}

func TestValidKeyID(t *testing.T) {
	for _, ok := range []string{"kek-0123", "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab", "alias/space+t=1@x"} {
		if err := kms.ValidKeyID(ok); err != nil {
			t.Errorf("ValidKeyID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a\x00", "ä", "a\n", strings.Repeat("k", kms.MaxKeyIDLen+1)} {
		if err := kms.ValidKeyID(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ValidKeyID(%.20q) = %v, want InvalidArgument", bad, err)
		}
	}
}
