package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// Media types an image importer reads (OCI image spec and Docker's v2 schema 2).
const (
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"

	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// Bounds on what an image may hold besides its layers' contents.
const (
	maxJSONBytes  = 4 << 20 // an index, manifest or config
	maxIndexDepth = 4       // nested indexes
	maxLayers     = 256
	maxListed     = 20 // descriptors named in a "which one?" error
)

// descriptor is the OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

func (p *platform) String() string {
	if p == nil {
		return "no platform"
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// index is an OCI image index or a Docker manifest list.
type index struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
}

// manifest is an OCI image manifest or a Docker v2 schema 2 manifest.
type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

// imageConfig is the part of an OCI image configuration an import uses.
type imageConfig struct {
	Config *ociConfig `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// ociConfig is the image configuration's "config" field: the defaults
// carried into a template (the shared contract of issue 24, whose Go type
// is imagecfg.Config once that package lands).
type ociConfig struct {
	User         string              `json:"User,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

// ImageConfigPath is where a template keeps the defaults of the image it was
// imported from, relative to its root (imagecfg.Path).
var ImageConfigPath = strings.TrimPrefix(imagecfg.Path, "/")

// writeImageConfig writes the image's defaults into the template tree as the
// guest daemon reads them (imagecfg): a WorkingDir with a trailing slash or
// dots is cleaned as the image runtime would; a value the guest would refuse
// fails the build, naming it, rather than a template whose defaults are
// silently ignored.
func writeImageConfig(dest string, c *ociConfig) error {
	var cfg imagecfg.Config
	if c != nil {
		cfg = imagecfg.Config{User: c.User, Env: c.Env, WorkingDir: c.WorkingDir,
			Entrypoint: c.Entrypoint, Cmd: c.Cmd, ExposedPorts: c.ExposedPorts, Labels: c.Labels}
		if path.IsAbs(cfg.WorkingDir) {
			cfg.WorkingDir = path.Clean(cfg.WorkingDir)
		}
	}
	if err := imagecfg.Write(dest, cfg); err != nil {
		return invalid("the image's config cannot be a template's defaults: %v", err)
	}
	return lchown(filepath.Join(dest, ImageConfigPath), 0, 0)
}

// blobStore opens the blobs of an image by digest.
type blobStore interface {
	open(digest string) (io.ReadCloser, error)
}

// ociDir is an OCI image layout directory: blobs/ALG/HEX.
type ociDir string

func (d ociDir) open(digest string) (io.ReadCloser, error) {
	hexPart, err := sha256Hex(digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(string(d), "blobs", "sha256", hexPart))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digest, err)
	}
	return f, nil
}

// sha256Hex returns the hex of a "sha256:HEX" digest; other algorithms and
// malformed digests are refused (a digest names a file).
func sha256Hex(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", invalid("digest %q: want sha256:<64 hex digits>", clip(digest))
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", invalid("digest %q: want sha256:<64 lowercase hex digits>", clip(digest))
	}
	return h, nil
}

// verifier hashes what is read through it and checks digest and size at EOF.
type verifier struct {
	r      io.Reader
	h      hash.Hash
	n      int64
	what   string
	digest string
	size   int64 // -1: unknown
}

func newVerifier(r io.Reader, what, digest string, size int64) *verifier {
	lim := r
	if size >= 0 {
		lim = io.LimitReader(r, size+1)
	}
	return &verifier{r: lim, h: sha256.New(), what: what, digest: digest, size: size}
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		return n, invalid("%s: longer than the %d bytes its descriptor says", v.what, v.size)
	}
	return n, err
}

// check reads what is left and compares the size and the digest.
func (v *verifier) check() error {
	if _, err := io.Copy(io.Discard, v); err != nil {
		return err
	}
	if v.size >= 0 && v.n != v.size {
		return invalid("%s: %d bytes, its descriptor says %d", v.what, v.n, v.size)
	}
	if got := "sha256:" + hex.EncodeToString(v.h.Sum(nil)); got != v.digest {
		return invalid("%s: content has digest %s, want %s (corrupt or tampered)", v.what, got, v.digest)
	}
	return nil
}

// readJSON reads a whole blob of at most maxJSONBytes, verifies it and decodes it.
func readJSON(bs blobStore, d descriptor, what string, v any) error {
	if d.Size < 0 || d.Size > maxJSONBytes {
		return invalid("%s %s: size %d, want at most %d bytes", what, d.Digest, d.Size, maxJSONBytes)
	}
	rc, err := bs.open(d.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer rc.Close()
	ver := newVerifier(rc, what+" "+d.Digest, d.Digest, d.Size)
	data, err := io.ReadAll(ver)
	if err == nil {
		err = ver.check()
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return invalid("%s %s: %v", what, d.Digest, err)
	}
	return nil
}

// parseIndexJSON decodes an image index read from a file (index.json).
func parseIndexJSON(data []byte) (index, error) {
	var ix index
	if err := json.Unmarshal(data, &ix); err != nil {
		return ix, invalid("index.json: %v", err)
	}
	if ix.MediaType != "" && ix.MediaType != mediaOCIIndex && ix.MediaType != mediaDockerList {
		return ix, invalid("index.json: media type %q is not an image index", clip(ix.MediaType))
	}
	if len(ix.Manifests) == 0 {
		return ix, invalid("index.json lists no manifests")
	}
	return ix, nil
}

// hostPlatform is the platform images are selected for: this machine's.
var hostPlatform = platform{OS: "linux", Architecture: runtime.GOARCH}

// candidate is an image manifest found under an index.
type candidate struct {
	desc descriptor
	ref  string // the ref.name annotation on the way, if any
}

// selectManifest picks the image manifest to import from index ix. With a
// ref, the descriptor named by that ref.name annotation or digest is taken
// (an index is then searched for the host's platform); without, the one
// manifest for the host's platform. Anything else is an error listing what
// the layout holds.
func selectManifest(bs blobStore, ix index, ref string) (descriptor, error) {
	var all []candidate
	if err := walkIndex(bs, ix, "", 0, &all); err != nil {
		return descriptor{}, err
	}
	var picked []candidate
	for _, c := range all {
		switch {
		case ref == "":
			if c.desc.Platform == nil || matchPlatform(*c.desc.Platform) {
				picked = append(picked, c)
			}
		case strings.HasPrefix(ref, "sha256:"):
			if c.desc.Digest == ref {
				picked = append(picked, c)
			}
		case c.ref == ref:
			if c.desc.Platform == nil || matchPlatform(*c.desc.Platform) {
				picked = append(picked, c)
			}
		}
	}
	// (buildkit's attestations are manifests for platform unknown/unknown:
	// they never match.)
	if len(picked) == 1 {
		return picked[0].desc, nil
	}
	var list []string
	for i, c := range all {
		if i == maxListed {
			list = append(list, fmt.Sprintf("and %d more", len(all)-i))
			break
		}
		s := c.desc.Digest + " " + c.desc.Platform.String()
		if c.ref != "" {
			s += " ref " + c.ref
		}
		list = append(list, s)
	}
	what := "no image for " + hostPlatform.String()
	if ref != "" {
		what = fmt.Sprintf("no image named %q for %s", clip(ref), hostPlatform.String())
	}
	if len(picked) > 1 {
		what = fmt.Sprintf("%d images match", len(picked))
	}
	return descriptor{}, fmt.Errorf("%s; the layout holds: %s; name one with oci:DIR#REF (a %s annotation or a manifest digest): %w",
		what, strings.Join(list, "; "), refNameAnnotation, errdefs.ErrInvalidArgument)
}

// walkIndex collects the image manifests under ix, reading nested indexes.
func walkIndex(bs blobStore, ix index, ref string, depth int, out *[]candidate) error {
	if depth > maxIndexDepth {
		return invalid("image indexes nested more than %d deep", maxIndexDepth)
	}
	for _, d := range ix.Manifests {
		if len(*out) > 4096 {
			return invalid("image index: more than 4096 manifests")
		}
		r := ref
		if name := d.Annotations[refNameAnnotation]; name != "" {
			r = name
		}
		switch d.MediaType {
		case mediaOCIManifest, mediaDockerManifest:
			*out = append(*out, candidate{desc: d, ref: r})
		case mediaOCIIndex, mediaDockerList:
			var sub index
			if err := readJSON(bs, d, "image index", &sub); err != nil {
				return err
			}
			// A digest names the index too: its manifests inherit it as ref.
			n := len(*out)
			if err := walkIndex(bs, sub, r, depth+1, out); err != nil {
				return err
			}
			for i := n; i < len(*out); i++ {
				if (*out)[i].ref == "" {
					(*out)[i].ref = d.Digest
				}
			}
		default:
			// Other artifacts (signatures, SBOMs) are not images.
		}
	}
	return nil
}

func matchPlatform(p platform) bool {
	return p.OS == hostPlatform.OS && p.Architecture == hostPlatform.Architecture
}

// layerCompression maps a layer's media type to its compression.
func layerCompression(mediaType string) (string, error) {
	switch mediaType {
	case "application/vnd.oci.image.layer.v1.tar",
		"application/vnd.oci.image.layer.nondistributable.v1.tar",
		"application/vnd.docker.image.rootfs.diff.tar":
		return "", nil
	case "application/vnd.oci.image.layer.v1.tar+gzip",
		"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
		"application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip":
		return "gzip", nil
	case "application/vnd.oci.image.layer.v1.tar+zstd",
		"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd":
		return "zstd", nil
	}
	return "", invalid("layer media type %q: want an OCI or Docker tar layer (plain, gzip or zstd)", clip(mediaType))
}

// uncompress returns the plain tar stream of a layer and a function to call
// when done. An empty compression is told from the stream's magic, as docker
// save writes plain tars under names that say nothing.
func uncompress(ctx context.Context, r io.Reader, compression string) (io.Reader, func() error, error) {
	switch compression {
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, invalid("bad gzip header: %v", err)
		}
		return zr, zr.Close, nil
	case "zstd":
		return filter(ctx, r, "zstd")
	case "magic":
		return decompress(ctx, r)
	}
	return r, func() error { return nil }, nil
}

// layer is one layer to apply: where its bytes are and what to check them against.
type layer struct {
	what        string // "layer 2 (sha256:…)"
	open        func() (io.ReadCloser, error)
	compression string // "", "gzip", "zstd" or "magic"
	// digest and size check the stored blob (size -1: not known).
	digest string
	size   int64
	// diffID, when set, checks the uncompressed tar.
	diffID string
}

// applyLayers applies layers in order, verifying each, within one Limits
// budget for all of them. A layer whose digest is wrong fails the build after
// it was applied (the tree is discarded by the caller): its entries were
// held to the same rules as any archive's while it streamed.
func applyLayers(ctx context.Context, dest string, layers []layer, progress io.Writer) error {
	if len(layers) > maxLayers {
		return invalid("image has %d layers, at most %d are supported", len(layers), maxLayers)
	}
	lim := DefaultLimits
	for _, l := range layers {
		fmt.Fprintf(progress, "applying %s\n", l.what)
		n, err := applyLayer(ctx, dest, l, lim)
		if err != nil {
			return fmt.Errorf("%s: %w", l.what, err)
		}
		lim.MaxBytes -= n
	}
	return nil
}

func applyLayer(ctx context.Context, dest string, l layer, lim Limits) (int64, error) {
	rc, err := l.open()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	var blob *verifier
	var r io.Reader = rc
	if l.digest != "" {
		blob = newVerifier(rc, "blob", l.digest, l.size)
		r = blob
	}
	plain, wait, err := uncompress(ctx, r, l.compression)
	if err != nil {
		return 0, err
	}
	var diff *verifier
	if l.diffID != "" {
		diff = newVerifier(plain, "uncompressed layer", l.diffID, -1)
		plain = diff
	}
	n, err := ExtractLayer(ctx, plain, dest, lim)
	if err == nil && diff != nil {
		err = diff.check()
	}
	if err == nil {
		// The tar ends before the stream does (padding); drain it so the
		// blob's digest covers every byte.
		_, err = io.Copy(io.Discard, plain)
	}
	err = errors.Join(err, wait())
	if err == nil && blob != nil {
		err = blob.check()
	}
	return n, err
}

// ociLayers reads manifest m's config and layer list from bs.
func ociLayers(bs blobStore, m manifest) (*imageConfig, []layer, error) {
	var cfg imageConfig
	if err := readJSON(bs, m.Config, "image config", &cfg); err != nil {
		return nil, nil, err
	}
	var layers []layer
	for i, d := range m.Layers {
		comp, err := layerCompression(d.MediaType)
		if err != nil {
			return nil, nil, fmt.Errorf("layer %d (%s): %w", i+1, d.Digest, err)
		}
		if _, err := sha256Hex(d.Digest); err != nil {
			return nil, nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		if d.Size < 0 {
			return nil, nil, invalid("layer %d (%s): negative size", i+1, d.Digest)
		}
		l := layer{what: fmt.Sprintf("layer %d of %d (%s)", i+1, len(m.Layers), d.Digest),
			open: func() (io.ReadCloser, error) { return bs.open(d.Digest) }, compression: comp, digest: d.Digest, size: d.Size}
		if i < len(cfg.RootFS.DiffIDs) && len(cfg.RootFS.DiffIDs) == len(m.Layers) {
			l.diffID = cfg.RootFS.DiffIDs[i]
		}
		layers = append(layers, l)
	}
	return &cfg, layers, nil
}

// importOCI builds a template from the OCI image layout at dir.
func importOCI(ctx context.Context, dir, ref, dest string, progress io.Writer) error {
	layoutFile, err := readSmallFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return fmt.Errorf("%s is not an OCI image layout (no oci-layout file; `skopeo copy` or `docker buildx --output type=oci` write one): %w", dir, err)
	}
	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(layoutFile, &lay); err != nil || lay.Version == "" {
		return invalid("%s/oci-layout: want {\"imageLayoutVersion\": \"1.0.0\"}", dir)
	}
	data, err := readSmallFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return err
	}
	ix, err := parseIndexJSON(data)
	if err != nil {
		return err
	}
	return importIndex(ctx, ociDir(dir), ix, ref, dest, progress)
}

func importIndex(ctx context.Context, bs blobStore, ix index, ref, dest string, progress io.Writer) error {
	d, err := selectManifest(bs, ix, ref)
	if err != nil {
		return err
	}
	var m manifest
	if err := readJSON(bs, d, "image manifest", &m); err != nil {
		return err
	}
	cfg, layers, err := ociLayers(bs, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "image %s: %d layers\n", d.Digest, len(layers))
	if err := applyLayers(ctx, dest, layers, progress); err != nil {
		return err
	}
	return writeImageConfig(dest, cfg.Config)
}

// readSmallFile reads a metadata file of at most maxJSONBytes.
func readSmallFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, invalidIfMissing(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJSONBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxJSONBytes {
		return nil, invalid("%s: larger than %d bytes", p, maxJSONBytes)
	}
	return data, nil
}

func invalidIfMissing(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return err
}

// dockerArchive is a `docker save` tar read in place: member name to its
// data's offset and size in the file.
type dockerArchive struct {
	f       *os.File
	members map[string][2]int64
}

// openDockerArchive indexes the regular files of the tar at p.
func openDockerArchive(p string) (*dockerArchive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, invalidIfMissing(err)
	}
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err == nil && (magic[0] == 0x1f && magic[1] == 0x8b || bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd})) {
		f.Close()
		return nil, invalid("%s is compressed; docker-archive: reads the plain tar `docker save` writes (decompress it first)", p)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	a := &dockerArchive{f: f, members: map[string][2]int64{}}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, invalid("docker archive %s: entry %d: %v", p, n, err)
		}
		if n >= 1<<16 {
			f.Close()
			return nil, invalid("docker archive %s: more than 65536 entries", p)
		}
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA {
			continue
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			f.Close()
			return nil, err
		}
		a.members[path.Clean(strings.TrimPrefix(hdr.Name, "./"))] = [2]int64{off, hdr.Size}
	}
	return a, nil
}

func (a *dockerArchive) Close() error { return a.f.Close() }

func (a *dockerArchive) member(name string) (io.ReadCloser, error) {
	m, ok := a.members[path.Clean(strings.TrimPrefix(name, "./"))]
	if !ok {
		return nil, invalid("docker archive has no member %q", clip(name))
	}
	return io.NopCloser(io.NewSectionReader(a.f, m[0], m[1])), nil
}

func (a *dockerArchive) readMember(name string) ([]byte, error) {
	m, ok := a.members[path.Clean(strings.TrimPrefix(name, "./"))]
	if !ok {
		return nil, invalid("docker archive has no member %q", clip(name))
	}
	if m[1] > maxJSONBytes {
		return nil, invalid("docker archive member %q: larger than %d bytes", clip(name), maxJSONBytes)
	}
	data := make([]byte, m[1])
	_, err := a.f.ReadAt(data, m[0])
	return data, err
}

// open makes the archive a blob store for the OCI layout docker 25 and
// later embed (blobs/sha256/HEX members).
func (a *dockerArchive) open(digest string) (io.ReadCloser, error) {
	h, err := sha256Hex(digest)
	if err != nil {
		return nil, err
	}
	return a.member("blobs/sha256/" + h)
}

// dockerManifestEntry is one image of a docker save manifest.json.
type dockerManifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// importDockerArchive builds a template from `docker save` output: the
// legacy layout (manifest.json, HEX.json config, HEX/layer.tar) and the one
// of docker 25+ (the same manifest.json over an embedded OCI layout) are
// read alike through manifest.json. The config is checked against the digest
// its name carries, each layer against the config's diff_ids (and against
// its blob name in the newer layout). ref picks an image by one of its
// RepoTags when the archive holds several.
func importDockerArchive(ctx context.Context, file, ref, dest string, progress io.Writer) error {
	a, err := openDockerArchive(file)
	if err != nil {
		return err
	}
	defer a.Close()
	data, err := a.readMember("manifest.json")
	if err != nil {
		return fmt.Errorf("%s is not a docker save archive: %w", file, err)
	}
	var entries []dockerManifestEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return invalid("manifest.json: %v", err)
	}
	e, err := pickDockerImage(entries, ref)
	if err != nil {
		return err
	}
	cfgData, err := a.readMember(e.Config)
	if err != nil {
		return err
	}
	// The config's name is its digest: "HEX.json" or "blobs/sha256/HEX".
	want := "sha256:" + strings.TrimSuffix(path.Base(e.Config), ".json")
	if got := "sha256:" + hex.EncodeToString(sha256Sum(cfgData)); got != want {
		return invalid("image config %s: content has digest %s (corrupt or tampered)", clip(e.Config), got)
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		return invalid("image config %s: %v", clip(e.Config), err)
	}
	if len(cfg.RootFS.DiffIDs) != len(e.Layers) {
		return invalid("image config lists %d layer digests (rootfs.diff_ids), manifest.json %d layers", len(cfg.RootFS.DiffIDs), len(e.Layers))
	}
	var layers []layer
	for i, name := range e.Layers {
		l := layer{what: fmt.Sprintf("layer %d of %d (%s)", i+1, len(e.Layers), clip(name)),
			open: func() (io.ReadCloser, error) { return a.member(name) }, compression: "magic", diffID: cfg.RootFS.DiffIDs[i], size: -1}
		if _, err := sha256Hex(l.diffID); err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
		if h, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			l.digest = "sha256:" + h
		}
		layers = append(layers, l)
	}
	fmt.Fprintf(progress, "image %s: %d layers\n", strings.Join(e.RepoTags, ","), len(layers))
	if err := applyLayers(ctx, dest, layers, progress); err != nil {
		return err
	}
	return writeImageConfig(dest, cfg.Config)
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func pickDockerImage(entries []dockerManifestEntry, ref string) (dockerManifestEntry, error) {
	if len(entries) == 0 {
		return dockerManifestEntry{}, invalid("manifest.json lists no images")
	}
	if ref == "" && len(entries) == 1 {
		return entries[0], nil
	}
	var tags []string
	for _, e := range entries {
		for _, t := range e.RepoTags {
			if t == ref {
				return e, nil
			}
			tags = append(tags, t)
		}
	}
	sort.Strings(tags)
	if len(tags) > maxListed {
		tags = append(tags[:maxListed], "…")
	}
	what := fmt.Sprintf("%d images", len(entries))
	if ref != "" {
		what = fmt.Sprintf("no image tagged %q", clip(ref))
	}
	return dockerManifestEntry{}, invalid("docker archive: %s; its tags: %s; name one with docker-archive:FILE#TAG", what, strings.Join(tags, ", "))
}
