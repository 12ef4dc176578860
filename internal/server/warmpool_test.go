package server

import (
	"errors"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

func TestParseWarmPool(t *testing.T) {
	good := map[string]WarmPool{
		"minimal:ns=8":       {Template: "minimal", Runtime: "ns", CPUs: sandbox.DefaultCPUs, MemoryMiB: sandbox.DefaultMemoryMiB, Size: 8},
		"base:vm:2x1024=2":   {Template: "base", Runtime: "vm", CPUs: 2, MemoryMiB: 1024, Size: 2},
		"my.tpl_1:ns:1x64=0": {Template: "my.tpl_1", Runtime: "ns", CPUs: 1, MemoryMiB: 64, Size: 0},
	}
	for in, want := range good {
		got, err := ParseWarmPool(in)
		if err != nil || got != want {
			t.Errorf("ParseWarmPool(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "minimal", "minimal:ns", "minimal=8", "minimal:ns=-1", "minimal:ns=257", "minimal:ns=x",
		"minimal:docker=1", "../x:ns=1", "Minimal:ns=1", "minimal:ns:2=1", "minimal:ns:0x256=1",
		"minimal:ns:1x1=1", "minimal:ns:99x256=1", "a:b:c:d=1", "minimal:ns:1x256x3=1",
	} {
		if _, err := ParseWarmPool(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseWarmPool(%q) = %v, want an invalid-argument error", in, err)
		}
	}
}

func FuzzParseWarmPool(f *testing.F) {
	for _, s := range []string{"minimal:ns=8", "base:vm:2x1024=2", "x:ns:1x64=0", "::=", "a:ns:1x=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseWarmPool(s)
		if err != nil {
			return
		}
		if sandbox.ValidateTemplateName(p.Template) != nil || (p.Runtime != "ns" && p.Runtime != "vm") ||
			p.Size < 0 || p.Size > maxWarmPoolSize || p.CPUs < sandbox.MinCPUs || p.CPUs > sandbox.MaxCPUs ||
			p.MemoryMiB < sandbox.MinMemoryMiB || p.MemoryMiB > sandbox.MaxMemoryMiB {
			t.Fatalf("ParseWarmPool(%q) accepted %+v", s, p)
		}
	})
}
