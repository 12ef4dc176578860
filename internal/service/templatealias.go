package service

import (
	"context"

	"github.com/spacesandbox/space/internal/store"
)

// An E2B template build (internal/e2bapi) of a name that exists makes a
// new SPACE template, NAME and a random suffix; the name then stands, for
// the tenant whose builds made it, for its latest ready build. Both
// creates, through /e2b and through SPACE's own API, resolve a name with
// AliasBuild, so that both start the same template.

// AliasBuild is the build alias stands for when tenant creates from it:
// tenant's latest ready build of alias (by UpdatedAt: when it became
// ready), or nil when tenant has none (the name is then the SPACE
// template of that name). Another tenant's builds are not looked at, so
// they never change what a name means for tenant.
func AliasBuild(ctx context.Context, st store.TemplateBuilds, tenant, alias string) (*store.TemplateBuild, error) {
	list, err := st.ListTemplateBuilds(ctx, alias)
	if err != nil {
		return nil, err
	}
	var cur *store.TemplateBuild
	for i := range list {
		b := &list[i]
		if b.TenantID != tenant || b.State != store.BuildReady {
			continue
		}
		if cur == nil || b.UpdatedAt.After(cur.UpdatedAt) {
			cur = b
		}
	}
	return cur, nil
}

// templateOf is the SPACE template a create of name by tenant starts:
// the template of tenant's latest ready build of alias name, else name.
func (s *Sandboxes) templateOf(ctx context.Context, tenant, name string) (string, error) {
	b, err := AliasBuild(ctx, s.store, tenant, name)
	if err != nil || b == nil {
		return name, err
	}
	return b.Template, nil
}

// isBuildOf reports whether template is the template of one of tenant's
// recorded builds of alias (a failed lookup says no).
func (s *Sandboxes) isBuildOf(ctx context.Context, tenant, alias, template string) bool {
	list, err := s.store.ListTemplateBuilds(ctx, alias)
	if err != nil {
		return false
	}
	for _, b := range list {
		if b.TenantID == tenant && b.Template == template {
			return true
		}
	}
	return false
}
