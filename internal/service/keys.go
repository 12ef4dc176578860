package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// MintKey makes a new API key of tenant (an admin key when admin) and
// records its hash: it returns the row and the key's secret text, which
// nothing stores and the caller shows once.
func MintKey(ctx context.Context, st store.Store, tenant string, admin bool) (store.APIKey, string, error) {
	k := apikey.New()
	row := store.APIKey{ID: k.ID, Tenant: tenant, Hash: k.Hash(), Admin: admin, CreatedAt: time.Now().UTC()}
	if err := st.CreateAPIKey(ctx, row); err != nil {
		return store.APIKey{}, "", err
	}
	return row, k.String(), nil
}

// e2bMintTries bounds the draws of an E2B-shaped key's 32-bit id: with a
// million keys in the store a draw collides once in 4,300, so 8 in a row
// do not happen.
const e2bMintTries = 8

// MintE2BKey is MintKey for a key in E2B's shape ("e2b_" + 40 hex,
// apikey.NewE2B): as strong, hashed and revoked as any key. Its id is
// drawn again when it is one in use.
func MintE2BKey(ctx context.Context, st store.Store, tenant string) (store.APIKey, string, error) {
	var err error
	for range e2bMintTries {
		k := apikey.NewE2B()
		row := store.APIKey{ID: k.ID, Tenant: tenant, Hash: k.Hash(), CreatedAt: time.Now().UTC()}
		if err = st.CreateAPIKey(ctx, row); err == nil {
			return row, k.String(), nil
		}
		if !errors.Is(err, errdefs.ErrConflict) {
			return store.APIKey{}, "", err
		}
	}
	return store.APIKey{}, "", fmt.Errorf("mint an E2B-shaped key: %d ids drawn were all in use: %w", e2bMintTries, err)
}
