package vmimage

import (
	"context"
	"os"
	"testing"

	"github.com/spacesandbox/space/internal/template"
)

func TestZZManual(t *testing.T) {
	if os.Getenv("VMX") == "" {
		t.Skip()
	}
	ctx := context.Background()
	b, err := Prepare(ctx, "/tmp/vmx/cache", "/tmp/vmx/space-guest")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel %s initrd %s", b.Kernel.Vmlinuz, b.Initrd)
	os.RemoveAll("/tmp/vmx/tpl")
	if err := template.Minimal(ctx, "/tmp/vmx/tpl"); err != nil {
		t.Fatal(err)
	}
	os.Remove("/tmp/vmx/root.img")
	if err := (RootImage{Dir: "/tmp/vmx/tpl", Dest: "/tmp/vmx/root.img"}).Build(ctx); err != nil {
		t.Fatal(err)
	}
}
