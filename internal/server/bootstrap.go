package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// AdminTenantID is the tenant the admin key belongs to.
const AdminTenantID = "t-admin00000000000"

// Bootstrap makes sure the admin tenant exists and that an admin key is written
// to keyFile (mode 0600). On first start it mints the key and returns it; when
// keyFile already holds a key it returns "" and changes nothing.
func Bootstrap(ctx context.Context, st store.Store, keyFile string) (string, error) {
	if _, err := os.Stat(keyFile); err == nil {
		return "", nil
	}
	_, err := st.GetTenant(ctx, AdminTenantID)
	if errors.Is(err, errdefs.ErrNotFound) {
		err = st.CreateTenant(ctx, store.Tenant{ID: AdminTenantID, Name: "admin", CreatedAt: time.Now().UTC()})
	}
	if err != nil {
		return "", fmt.Errorf("bootstrap: admin tenant: %w", err)
	}
	_, secret, err := service.MintKey(ctx, st, AdminTenantID, true)
	if err != nil {
		return "", fmt.Errorf("bootstrap: admin key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		return "", err
	}
	tmp := keyFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("bootstrap: write %s: %w", keyFile, err)
	}
	if err := os.Rename(tmp, keyFile); err != nil {
		return "", fmt.Errorf("bootstrap: write %s: %w", keyFile, err)
	}
	return secret, nil
}
