package service

import (
	"context"
	"time"

	"github.com/spacesandbox/space/internal/apikey"
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
