package imagebuild

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// A base image (oci:DIR[#REF] or docker-archive:FILE[#TAG]) is imported once
// as a template (source the image, read by the server from its path) and
// the steps run on that template. ImportBase is shared by the Dockerfile
// build of the CLI and the E2B template API.

// ImportBase builds template name from the image source src unless a
// template of that name exists already, logging which to log.
func ImportBase(ctx context.Context, b Backend, src, name string, log io.Writer) error {
	taken, err := b.TemplateTaken(ctx, name)
	if err != nil {
		return fmt.Errorf("base image %s: %w", printable(src), err)
	}
	if taken {
		fmt.Fprintf(log, "base: %s imported already as template %s\n", printable(src), name)
		return nil
	}
	fmt.Fprintf(log, "base: importing %s as template %s\n", printable(src), name)
	if _, err := b.BuildTemplate(ctx, sandboxv1.BuildTemplateRequest{Name: name, From: src}); err != nil {
		return fmt.Errorf("base image %s: import as template %s: %w", printable(src), name, err)
	}
	return nil
}

// BaseName is the template an image of identity id is imported as:
// prefix and the first 16 hex digits of id's sha256.
func BaseName(prefix, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + hex.EncodeToString(sum[:8])
}

// ImageSource reports whether a Dockerfile's FROM names a local image,
// oci:DIR[#REF] or docker-archive:FILE[#TAG], a path relative to
// contextDir or absolute. It returns the source with the absolute path
// (which the server reads) and the image's identity: its index.json (oci,
// which holds the manifests' digests) or its manifest.json and config
// (docker-archive, whose config lists the layers' digests), so a changed
// image gets a new identity and is imported again.
func ImageSource(from, contextDir string) (src, id string, ok bool, err error) {
	kind, rest, found := strings.Cut(from, ":")
	if !found || (kind != "oci" && kind != "docker-archive") {
		return "", "", false, nil
	}
	p, ref, _ := strings.Cut(rest, "#")
	if p == "" || strings.ContainsRune(from, 0) {
		return "", "", true, fmt.Errorf("FROM %s: want %s:PATH (relative to the context or absolute)", printable(from), kind)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(contextDir, p)
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", "", true, fmt.Errorf("FROM %s: %w", printable(from), err)
	}
	var digest []byte
	if kind == "oci" {
		digest, err = os.ReadFile(filepath.Join(p, "index.json"))
	} else {
		digest, err = archiveIdentity(p)
	}
	if err != nil {
		return "", "", true, fmt.Errorf("FROM %s: not a readable %s image: %w", printable(from), kind, err)
	}
	src = kind + ":" + p
	if ref != "" {
		src += "#" + ref
	}
	sum := sha256.Sum256(digest)
	return src, kind + "#" + ref + "@sha256:" + hex.EncodeToString(sum[:]), true, nil
}

// maxManifest bounds what archiveIdentity reads of a manifest or config.
const maxManifest = 4 << 20

// archiveIdentity is a docker archive's manifest.json followed by the
// config files it names.
func archiveIdentity(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	members := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg || h.Size > maxManifest {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name != "manifest.json" && !strings.HasSuffix(name, ".json") && !strings.HasPrefix(name, "blobs/") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		members[name] = b
	}
	man, ok := members["manifest.json"]
	if !ok {
		return nil, errors.New("no manifest.json in the archive")
	}
	var entries []struct{ Config string }
	if err := json.Unmarshal(man, &entries); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	out := append([]byte{}, man...)
	for _, e := range entries {
		cfg, ok := members[path.Clean(e.Config)]
		if !ok {
			return nil, fmt.Errorf("manifest.json names config %s, which is not in the archive", printable(e.Config))
		}
		out = append(out, cfg...)
	}
	return out, nil
}
