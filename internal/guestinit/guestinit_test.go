package guestinit

import (
	"slices"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"hostname":"sbx-1","env":{"A":"b c","EMPTY":""}}`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.Hostname != "sbx-1" || c.Env["A"] != "b c" || c.Probe || c.Network {
		t.Errorf("got %+v", c)
	}
	if c, err := ParseConfig([]byte(`{"network":true}`)); err != nil || !c.Network {
		t.Errorf("ParseConfig(network) = %+v, %v; want Network", c, err)
	}
	for _, bad := range []string{
		`{"hostname":"a b"}`,
		`{"hostname":"` + strings.Repeat("a", 65) + `"}`,
		`{"env":{"A=B":"x"}}`,
		`{"env":{"":"x"}}`,
		`{"env":{"A":"x\u0000y"}}`,
		`not json`,
		`{"hostname":` + strings.Repeat(" ", MaxConfigBytes) + `"a"}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("ParseConfig(%.40q) = nil error, want a rejection", bad)
		}
	}
}

func TestParseModuleOrder(t *testing.T) {
	got, err := ParseModuleOrder([]byte("virtio.ko\n\n virtio_pci.ko \n"))
	if err != nil || !slices.Equal(got, []string{"virtio.ko", "virtio_pci.ko"}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"../x.ko", "a/b.ko", "x.so", ".ko", "x\x00.ko"} {
		if _, err := ParseModuleOrder([]byte(bad)); err == nil {
			t.Errorf("ParseModuleOrder(%q) = nil error", bad)
		}
	}
}

func TestDaemonEnv(t *testing.T) {
	got := daemonEnv([]string{"HOME=/", "TERM=linux", "junk"}, map[string]string{"TERM": "xterm", "X": "1"})
	want := []string{"HOME=/", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm", "X=1"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"hostname":"a","env":{"K":"V"},"probe":true,"network":true}`))
	f.Add([]byte(`{"env":{"=":""}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		for _, kv := range daemonEnv(nil, c.Env) {
			if strings.ContainsRune(kv, 0) || strings.HasPrefix(kv, "=") {
				t.Fatalf("bad environment entry %q", kv)
			}
		}
	})
}

func FuzzParseModuleOrder(f *testing.F) {
	f.Add([]byte("a.ko\nb.ko\n"))
	f.Add([]byte("../../etc/passwd.ko"))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := ParseModuleOrder(b)
		if err != nil {
			return
		}
		for _, n := range names {
			if strings.ContainsAny(n, "/\x00") || !strings.HasSuffix(n, ".ko") {
				t.Fatalf("accepted %q", n)
			}
		}
	})
}
