// Package template builds the root filesystems sandboxes start from. It writes
// a finished tree into a directory the caller gives (the caller owns storage:
// a btrfs subvolume, a plain directory) from one of five sources: a directory
// on this machine, a tar archive, an OCI image layout, a `docker save` archive
// or a debootstrap recipe. Two templates are
// built in: Minimal (busybox, in well under a second) and Base (Debian 12 with
// bash, python3 as python too, git, curl and sudo, through debootstrap).
//
// Every template gets an empty /.space (where the guest daemon is mounted) and
// an /etc/hostname.
//
// Sources are paths on the server's machine named by an administrator, but an
// archive's contents are treated as hostile: extraction never writes outside
// dest, never through a symlink, skips device nodes and stops at a size limit.
package template

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Kind is what a Source builds from.
type Kind string

// The source kinds.
const (
	KindDir         Kind = "dir"
	KindTar         Kind = "tar"
	KindDebootstrap Kind = "debootstrap"
	// KindOCI is an OCI image layout directory; KindDockerArchive a
	// `docker save` tar. Both are applied layer by layer (see ExtractLayer).
	KindOCI           Kind = "oci"
	KindDockerArchive Kind = "docker-archive"
	// KindExt4 is an ext4 filesystem image: a vm sandbox's disk snapshot,
	// which the node-manager names (the control plane's API offers no
	// ext4: source). It is read in user space (ext4tar), never mounted.
	KindExt4 Kind = "ext4"
)

// Source says what to build a template from.
type Source struct {
	Kind Kind
	// Path is the directory or archive for KindDir and KindTar: absolute.
	Path string
	// Ref picks one image of an OCI layout (an
	// org.opencontainers.image.ref.name annotation or a manifest digest) or
	// of a docker archive (one of its RepoTags); empty: the only image for
	// this machine's platform.
	Ref string
	// Suite and Packages are the Debian release and the extra packages for
	// KindDebootstrap.
	Suite    string
	Packages []string
}

// String returns the source in the form ParseSource reads.
func (s Source) String() string {
	switch s.Kind {
	case KindDebootstrap:
		if len(s.Packages) == 0 {
			return "debootstrap:" + s.Suite
		}
		return "debootstrap:" + s.Suite + "+" + strings.Join(s.Packages, ",")
	case KindOCI, KindDockerArchive:
		if s.Ref != "" {
			return string(s.Kind) + ":" + s.Path + "#" + s.Ref
		}
		return string(s.Kind) + ":" + s.Path
	default:
		return string(s.Kind) + ":" + s.Path
	}
}

// tarSuffixes are the archive names a bare path is recognised as a tar by.
var tarSuffixes = []string{".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2"}

// ParseSource reads a template source:
//
//	dir:/path            a directory tree
//	/path                a directory, or a tar archive when it ends in .tar[.gz|.zst|.xz|.bz2] or .tgz
//	tar:/path.tar[.gz]   a tar archive, optionally gzip, zstd, xz or bzip2 compressed
//	debootstrap:SUITE[+pkg,pkg…]
//	oci:/dir[#REF]       an OCI image layout; REF is a ref.name annotation or sha256:… digest
//	docker-archive:/file.tar[#REPO:TAG]   `docker save` output
//	ext4:/disk.img       an ext4 filesystem image (a vm disk snapshot)
//
// Paths must be absolute. Errors are of class ErrInvalidArgument.
func ParseSource(s string) (Source, error) {
	kind, rest, hasKind := strings.Cut(s, ":")
	if !hasKind || strings.HasPrefix(s, "/") {
		kind, rest = string(KindDir), s
		for _, suf := range tarSuffixes {
			if strings.HasSuffix(s, suf) {
				kind = string(KindTar)
			}
		}
	}
	switch Kind(kind) {
	case KindDir, KindTar, KindExt4:
		if err := checkPath(rest); err != nil {
			return Source{}, err
		}
		return Source{Kind: Kind(kind), Path: filepath.Clean(rest)}, nil
	case KindDebootstrap:
		return parseDebootstrap(rest)
	case KindOCI, KindDockerArchive:
		p, ref, _ := strings.Cut(rest, "#")
		if err := checkPath(p); err != nil {
			return Source{}, err
		}
		if err := checkRef(ref); err != nil {
			return Source{}, err
		}
		return Source{Kind: Kind(kind), Path: filepath.Clean(p), Ref: ref}, nil
	}
	return Source{}, invalid("template source %q: want dir:/path, tar:/path.tar[.gz], oci:/dir[#REF], docker-archive:/file.tar[#TAG], debootstrap:SUITE[+pkg,…] or an absolute path", clip(s))
}

func checkPath(p string) error {
	switch {
	case !filepath.IsAbs(p):
		return invalid("template source path %q: must be absolute", clip(p))
	case strings.IndexByte(p, 0) >= 0:
		return invalid("template source path: contains NUL")
	case len(p) > 4096:
		return invalid("template source path: longer than 4096 bytes")
	}
	return nil
}

// checkRef accepts an image reference: printable, no spaces, at most 256 bytes.
func checkRef(ref string) error {
	if len(ref) > 256 {
		return invalid("image reference: longer than 256 bytes")
	}
	for _, c := range ref {
		if c <= ' ' || c == 0x7f {
			return invalid("image reference %q: contains a space or control character", clip(ref))
		}
	}
	return nil
}

func parseDebootstrap(rest string) (Source, error) {
	suite, pkgList, hasPkgs := strings.Cut(rest, "+")
	if !validSuite(suite) {
		return Source{}, invalid("debootstrap suite %q: want a Debian release name like bookworm", clip(suite))
	}
	src := Source{Kind: KindDebootstrap, Suite: suite}
	if !hasPkgs {
		return src, nil
	}
	for _, p := range strings.Split(pkgList, ",") {
		if !validPackage(p) {
			return Source{}, invalid("debootstrap package %q: not a Debian package name", clip(p))
		}
		src.Packages = append(src.Packages, p)
	}
	if len(src.Packages) > 256 {
		return Source{}, invalid("debootstrap: more than 256 packages")
	}
	return src, nil
}

// validSuite accepts Debian suite and codename shapes: bookworm, stable,
// bookworm-backports.
func validSuite(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// validPackage follows Debian policy §5.6.1: lowercase letters, digits, '+',
// '-' and '.', at least two characters, starting with a letter or digit. An
// optional ":arch" qualifier is not accepted: templates are native.
func validPackage(s string) bool {
	if len(s) < 2 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '+' && c != '-' && c != '.') {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// clip shortens untrusted text before it is quoted in an error.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "…"
}
