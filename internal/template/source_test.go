package template

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Source
		err  bool
	}{
		{"dir:/srv/root", Source{Kind: KindDir, Path: "/srv/root"}, false},
		{"/srv/root/", Source{Kind: KindDir, Path: "/srv/root"}, false},
		{"/srv/root.tar", Source{Kind: KindTar, Path: "/srv/root.tar"}, false},
		{"/srv/root.tar.gz", Source{Kind: KindTar, Path: "/srv/root.tar.gz"}, false},
		{"/srv/root.tgz", Source{Kind: KindTar, Path: "/srv/root.tgz"}, false},
		{"tar:/srv/root.tar.zst", Source{Kind: KindTar, Path: "/srv/root.tar.zst"}, false},
		{"/srv/with:colon", Source{Kind: KindDir, Path: "/srv/with:colon"}, false},
		{"debootstrap:bookworm", Source{Kind: KindDebootstrap, Suite: "bookworm"}, false},
		{"debootstrap:bookworm+python3,g++,libstdc++6", Source{Kind: KindDebootstrap, Suite: "bookworm", Packages: []string{"python3", "g++", "libstdc++6"}}, false},
		{"debootstrap:bookworm-backports+curl", Source{Kind: KindDebootstrap, Suite: "bookworm-backports", Packages: []string{"curl"}}, false},
		{"dir:relative", Source{}, true},
		{"relative/path", Source{}, true},
		{"tar:", Source{}, true},
		{"debootstrap:", Source{}, true},
		{"debootstrap:Bookworm", Source{}, true},
		{"debootstrap:bookworm+", Source{}, true},
		{"debootstrap:bookworm+curl,,git", Source{}, true},
		{"debootstrap:bookworm+curl;rm -rf /", Source{}, true},
		{"debootstrap:bookworm+-oDebug", Source{}, true},
		{"debootstrap:../x", Source{}, true},
		{"oci:/srv/layout", Source{Kind: KindOCI, Path: "/srv/layout"}, false},
		{"oci:/srv/layout/#app:1.0", Source{Kind: KindOCI, Path: "/srv/layout", Ref: "app:1.0"}, false},
		{"docker-archive:/srv/img.tar#busybox:latest", Source{Kind: KindDockerArchive, Path: "/srv/img.tar", Ref: "busybox:latest"}, false},
		{"docker-archive:/srv/img.tar", Source{Kind: KindDockerArchive, Path: "/srv/img.tar"}, false},
		{"oci:layout", Source{}, true},
		{"oci:/srv/layout#a b", Source{}, true},
		{"docker-archive:", Source{}, true},
		{"http://example.com/x.tar", Source{}, true},
		{"dir:/a\x00b", Source{}, true},
	} {
		got, err := ParseSource(tc.in)
		if tc.err {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseSource(%q) = %+v, %v; want ErrInvalidArgument", tc.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		again, err := ParseSource(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseSource(%q.String() = %q) = %+v, %v; want round trip", tc.in, got.String(), again, err)
		}
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"dir:/a", "/a.tar.gz", "debootstrap:bookworm+git,curl", "tar:", "debootstrap:+", "oci:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := ParseSource(s)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not ErrInvalidArgument", err)
			}
			return
		}
		switch src.Kind {
		case KindDir, KindTar, KindOCI, KindDockerArchive:
			if !strings.HasPrefix(src.Path, "/") || strings.Contains(src.Path, "\x00") {
				t.Fatalf("accepted path %q", src.Path)
			}
		case KindDebootstrap:
			// Nothing that reaches debootstrap's command line may look
			// like an option or carry shell or separator characters.
			for _, a := range append([]string{src.Suite}, src.Packages...) {
				if a == "" || strings.HasPrefix(a, "-") || strings.ContainsAny(a, " ,;/\x00") {
					t.Fatalf("accepted argument %q", a)
				}
			}
		default:
			t.Fatalf("unknown kind %q", src.Kind)
		}
		if again, err := ParseSource(src.String()); err != nil || !reflect.DeepEqual(again, src) {
			t.Fatalf("round trip of %q: %+v, %v", src.String(), again, err)
		}
	})
}

func TestMirror(t *testing.T) {
	list := `# comment
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://mirror.example/debian bookworm main contrib
deb http://security.debian.org/debian-security bookworm-security main
deb-src http://src.example/debian bookworm main
`
	deb822 := `Types: deb
URIs: http://proxy.local:3142/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: trixie
Components: main
`
	if got, ok := pickMirror(parseSourcesList(list), "bookworm"); !ok || got != "http://mirror.example/debian" {
		t.Errorf("sources.list mirror = %q, %v", got, ok)
	}
	if got, ok := pickMirror(parseDeb822(deb822), "bookworm"); !ok || got != "http://proxy.local:3142/debian" {
		t.Errorf("deb822 mirror = %q, %v", got, ok)
	}
	// Another suite than the host's: the host's main archive still serves it.
	if got, ok := pickMirror(parseDeb822(deb822), "trixie"); !ok || got != "http://proxy.local:3142/debian" {
		t.Errorf("deb822 mirror for trixie = %q, %v", got, ok)
	}
	if _, ok := pickMirror(parseSourcesList("deb cdrom:[Debian]/ bookworm main\n"), "bookworm"); ok {
		t.Error("picked a cdrom source")
	}
	if got := HostMirror("bookworm"); !strings.Contains(got, "://") {
		t.Errorf("HostMirror = %q", got)
	}
}
