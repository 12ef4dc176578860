package e2bapi

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// templateSpec is the body of POST /v2/templates/{templateID}/builds/{buildID}:
// what the e2b SDKs' Template serializes (JS 2.51 src/template/index.ts
// serialize).
type templateSpec struct {
	FromTemplate      string          `json:"fromTemplate,omitempty"`
	FromImage         string          `json:"fromImage,omitempty"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry,omitempty"`
	Steps             []templateStep  `json:"steps"`
	StartCmd          string          `json:"startCmd,omitempty"`
	ReadyCmd          string          `json:"readyCmd,omitempty"`
	Force             bool            `json:"force,omitempty"`
}

// templateStep is one Template instruction. The SDKs emit five types: RUN
// [cmd, user?], COPY [src, dest, user, mode], ENV [k, v, ...], WORKDIR
// [dir] and USER [user]; every other Template method (aptInstall,
// pipInstall, gitClone, makeDir, remove, ...) is a RUN.
type templateStep struct {
	Type            string   `json:"type"`
	Args            []string `json:"args"`
	FilesHash       string   `json:"filesHash,omitempty"`
	Force           bool     `json:"force,omitempty"`
	ForceUpload     bool     `json:"forceUpload,omitempty"`
	ResolveSymlinks bool     `json:"resolveSymlinks,omitempty"`
}

// maxTemplateSteps bounds a template's steps.
const maxTemplateSteps = 1000

// copyDir is the directory of the build context where COPY step i's
// upload is extracted: every COPY has its own, as each has its own tar.
func copyDir(i int) string { return fmt.Sprintf("copy%d", i) }

// dockerfileOf is spec as the Dockerfile builder's steps (internal/imagebuild):
// COPY step i reads its sources from copyDir(i) of the context. It refuses,
// naming the feature, what SPACE cannot build.
func dockerfileOf(spec templateSpec) (*dockerfile.File, bool, error) {
	from := spec.FromTemplate
	_, local, err := localImage(spec.FromImage)
	switch {
	case err != nil:
		return nil, false, err
	case local && spec.FromTemplate != "":
		return nil, false, fmt.Errorf("%w: both fromImage and fromTemplate: name one base", errdefs.ErrInvalidArgument)
	case local:
		// FROM is the template the image is imported as, named after its
		// content (imageBase), which is read once the caller is known to
		// be an admin.
	case spec.FromImage != "" || len(spec.FromImageRegistry) > 0:
		return nil, false, fmt.Errorf("%w: fromImage and fromImageRegistry (a base image pulled from a registry) are not supported by SPACE, whose control plane reaches no registry: import the image once with `space template build NAME --from oci:DIR` (or docker-archive:FILE) and build on it with fromTemplate('NAME'), or, with an admin key, name the layout on the server: fromImage('oci:/DIR') or fromImage('docker-archive:/FILE') (docs/e2b.md)", errdefs.ErrInvalidArgument)
	case spec.FromTemplate == "":
		return nil, false, fmt.Errorf("%w: the template names no base: use fromTemplate('NAME') with a SPACE template (docs/e2b.md)", errdefs.ErrInvalidArgument)
	case strings.ContainsAny(spec.FromTemplate, ":/"):
		return nil, false, fmt.Errorf("%w: fromTemplate(%q): not a SPACE template name (tags and team prefixes are not supported)", errdefs.ErrInvalidArgument, service.Clip(spec.FromTemplate))
	case len(spec.Steps) > maxTemplateSteps:
		return nil, false, fmt.Errorf("%w: %d steps: at most %d", errdefs.ErrInvalidArgument, len(spec.Steps), maxTemplateSteps)
	}
	df := &dockerfile.File{From: from}
	force := spec.Force
	for i, s := range spec.Steps {
		in, err := instructionOf(i, s)
		if err != nil {
			return nil, false, fmt.Errorf("%w: step %d (%s): %v", errdefs.ErrInvalidArgument, i+1, service.Clip(s.Type), err)
		}
		force = force || s.Force
		df.Steps = append(df.Steps, in)
	}
	if spec.StartCmd != "" {
		df.Steps = append(df.Steps, dockerfile.Instruction{
			Line: len(spec.Steps) + 1, Cmd: "CMD", JSON: true,
			Args: []string{"/bin/sh", "-c", spec.StartCmd}, Text: "CMD " + jsonText([]string{"/bin/sh", "-c", spec.StartCmd}),
		})
	}
	return df, force, nil
}

// instructionOf is step i. Line is its E2B step number (i+1), which the
// SDKs map back to the Template call that made it.
func instructionOf(i int, s templateStep) (dockerfile.Instruction, error) {
	in := dockerfile.Instruction{Line: i + 1, Cmd: s.Type, Text: s.Type + " " + jsonText(s.Args)}
	switch s.Type {
	case "RUN":
		if len(s.Args) < 1 || len(s.Args) > 2 || s.Args[0] == "" {
			return in, fmt.Errorf("want [command] or [command, user]")
		}
		in.Args = s.Args[:1]
		if len(s.Args) == 2 && s.Args[1] != "" {
			in.Flags = map[string]string{"user": s.Args[1]}
		}
	case "COPY":
		if len(s.Args) < 2 || len(s.Args) > 4 {
			return in, fmt.Errorf("want [src, dest, user, mode]")
		}
		src, err := copySource(s.Args[0])
		if err != nil {
			return in, err
		}
		if !validFilesHash(s.FilesHash) {
			return in, fmt.Errorf("filesHash %q: want 64 hex digits (the SDK computes it)", service.Clip(s.FilesHash))
		}
		in.Args = []string{path.Join(copyDir(i), src), s.Args[1]}
		in.Flags = map[string]string{}
		if len(s.Args) > 2 && s.Args[2] != "" {
			in.Flags["chown"] = s.Args[2]
		}
		if len(s.Args) > 3 && s.Args[3] != "" {
			in.Flags["chmod"] = s.Args[3]
		}
		// The key covers the uploaded content through the context's
		// files, and the hash the SDK computed.
		in.Text += " " + s.FilesHash
	case "ENV":
		if len(s.Args) == 0 || len(s.Args)%2 != 0 {
			return in, fmt.Errorf("want [name, value, ...]")
		}
		for j := 0; j < len(s.Args); j += 2 {
			if s.Args[j] == "" || strings.ContainsAny(s.Args[j], "=\x00") {
				return in, fmt.Errorf("environment variable name %q", service.Clip(s.Args[j]))
			}
		}
		in.Args = s.Args
	case "WORKDIR", "USER":
		if len(s.Args) != 1 || s.Args[0] == "" {
			return in, fmt.Errorf("want one argument")
		}
		in.Args = s.Args
	default:
		return in, fmt.Errorf("unknown step type: SPACE builds RUN, COPY, ENV, WORKDIR and USER steps")
	}
	return in, nil
}

// copySource is a COPY source: relative to the template's file context,
// inside it (the SDK checks the same), no glob (SPACE copies named paths).
func copySource(src string) (string, error) {
	if src == "" || path.IsAbs(src) {
		return "", fmt.Errorf("source %q: want a path relative to the file context", service.Clip(src))
	}
	clean := path.Clean(src)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("source %q leaves the file context", service.Clip(src))
	}
	if strings.ContainsAny(src, "*?[") {
		return "", fmt.Errorf("source %q: glob patterns are not supported by SPACE; copy a file or a directory", service.Clip(src))
	}
	return clean, nil
}

// validFilesHash reports whether h is what the SDKs' calculateFilesHash
// makes: a SHA-256 in lower-case hex.
func validFilesHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// localImage reports whether fromImage names an image on the server's
// filesystem (oci:/DIR[#REF] or docker-archive:/FILE[#TAG]) and returns
// it; such a name that is not an absolute path is an error.
func localImage(fromImage string) (string, bool, error) {
	kind, rest, ok := strings.Cut(fromImage, ":")
	if !ok || (kind != "oci" && kind != "docker-archive") {
		return "", false, nil
	}
	if !strings.HasPrefix(rest, "/") || strings.ContainsRune(rest, 0) || len(fromImage) > maxImageSource {
		return "", false, fmt.Errorf("%w: fromImage(%q): want %s:/ABSOLUTE/PATH on the server's machine (at most %d bytes)", errdefs.ErrInvalidArgument, service.Clip(fromImage), kind, maxImageSource)
	}
	return fromImage, true, nil
}

// maxImageSource bounds a fromImage source.
const maxImageSource = 4096

// imageBase reads the image fromImage names on the server's filesystem
// (an admin's: the server reads it with its own rights) and returns the
// source to import it from and the template it is imported as, once:
// e2bimg- and 16 hex digits of the image's identity (imagebuild.ImageSource:
// the layout's index.json, the archive's manifest and configs, which hold
// the digests of everything else, and the ref), not of its path, so the
// same path with new content is imported anew and one image under two
// paths is imported once.
func imageBase(fromImage string) (src, name string, err error) {
	src, id, _, err := imagebuild.ImageSource(fromImage, "/")
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	return src, imagebuild.BaseName(ImagePrefix, id), nil
}

// ImagePrefix begins the name of a template a fromImage is imported as.
const ImagePrefix = imagebuild.E2BImportPrefix
