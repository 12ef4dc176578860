package server

import (
	"net/http"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/store"
)

// TestV1CreateOfE2BAlias: POST /v1/sandboxes of a name E2B builds made
// starts the caller's tenant's latest ready build of it, and the sandbox
// (as created and as read back) names that template; another tenant's
// create of the name starts the template of that name.
func TestV1CreateOfE2BAlias(t *testing.T) {
	cp := newControlPlane(t, Config{})
	cp.beat([]string{"ns"}, nil)
	ctx := t.Context()
	for i, tpl := range []string{"web", "web.aaaaaaaa"} {
		cp.setTemplate(tpl, store.TemplateReady, "")
		b := store.TemplateBuild{ID: "bld-" + tpl, TenantID: cp.tenant, Alias: "web", Template: tpl, State: store.BuildWaiting}
		if err := cp.st.CreateTemplateBuild(ctx, b); err != nil {
			t.Fatal(err)
		}
		b.State = store.BuildReady
		if err := cp.st.UpdateTemplateBuild(ctx, b); err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
	}
	for _, tc := range []struct {
		who, key, want string
	}{
		{"the builds' tenant", cp.key, "web.aaaaaaaa"},
		{"another tenant", cp.other, "web"},
	} {
		var sb sandboxv1.Sandbox
		if code, e := cp.do(tc.key, http.MethodPost, "/v1/sandboxes", `{"template":"web","runtime":"ns"}`, &sb); code != http.StatusCreated {
			t.Fatalf("%s: create of web: HTTP %d %+v", tc.who, code, e)
		}
		if sb.Template != tc.want {
			t.Errorf("%s: create of web answered template %q, want %q", tc.who, sb.Template, tc.want)
		}
		var got sandboxv1.Sandbox
		if code, e := cp.do(tc.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got); code != http.StatusOK || got.Template != tc.want {
			t.Errorf("%s: GET of %s: HTTP %d %+v, template %q, want %q", tc.who, sb.ID, code, e, got.Template, tc.want)
		}
	}
}
