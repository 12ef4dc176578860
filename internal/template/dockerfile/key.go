package dockerfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// StepKey is a build step's cache key: sha256 over the parent step's key, the
// instruction as executed (Text, after substitution) and, for COPY/ADD, the
// content hash of its sources. Equal keys mean the step's result can be
// reused from the snapshot cached under that key.
func StepKey(parent string, in Instruction, contentHash string) string {
	h := sha256.New()
	fmt.Fprintf(h, "space-dockerfile-step-v1\x00%s\x00%s\x00%s", parent, in.Text, contentHash)
	return hex.EncodeToString(h.Sum(nil))
}

// ContentHash hashes what a COPY/ADD would copy from contextDir: for every
// source, each file and directory under it (names, modes, sizes, bytes,
// in-context symlink targets), in a fixed order. Sources are resolved with
// ResolveSource, so a source reaching outside the context is an error here
// too. A symlink inside a copied directory is hashed as a link (its target
// text), as it is copied as a link.
func ContentHash(contextDir string, sources []string) (string, error) {
	h := sha256.New()
	for _, src := range sources {
		p, err := ResolveSource(contextDir, src)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "source\x00%s\x00", src)
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(p, path)
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%o\x00", filepath.ToSlash(rel), fi.Mode())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				t, err := os.Readlink(path)
				if err != nil {
					return err
				}
				fmt.Fprintf(h, "link\x00%s\x00", t)
			case fi.Mode().IsRegular():
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				defer f.Close()
				fmt.Fprintf(h, "file\x00%d\x00", fi.Size())
				if _, err := io.Copy(h, f); err != nil {
					return err
				}
			case fi.IsDir():
			default:
				return fmt.Errorf("%s: not a file, directory or symlink (%s): COPY copies only those", path, fi.Mode().Type())
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("hash COPY source %s: %w", src, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ImageConfigJSON is the template's image defaults from the Dockerfile's ENV,
// USER, WORKDIR, ENTRYPOINT, CMD, EXPOSE and LABEL, in the JSON of the issue 24
// contract (OCI image config field names; absent fields omitted), written by
// the builder at /etc/space/image-config.json, validated as the guest daemon
// reads it (imagecfg.Marshal): a value the guest would ignore is an error
// here, at build time. Shell-form CMD and
// ENTRYPOINT become ["/bin/sh", "-c", line], as Docker records them; an
// ENTRYPOINT resets an earlier CMD, as in Docker.
func ImageConfigJSON(f *File) ([]byte, error) {
	var c imagecfg.Config
	env := map[string]int{} // name -> index in c.Env
	workdir := ""
	for _, s := range f.Steps {
		switch s.Cmd {
		case "ENV":
			for i := 0; i < len(s.Args); i += 2 {
				kv := s.Args[i] + "=" + s.Args[i+1]
				if j, ok := env[s.Args[i]]; ok {
					c.Env[j] = kv
				} else {
					env[s.Args[i]] = len(c.Env)
					c.Env = append(c.Env, kv)
				}
			}
		case "USER":
			c.User = s.Args[0]
		case "WORKDIR":
			w := s.Args[0]
			if !strings.HasPrefix(w, "/") {
				w = filepath.Join("/", workdir, w)
			}
			workdir = filepath.Clean(w)
			c.WorkingDir = workdir
		case "ENTRYPOINT":
			c.Entrypoint, c.Cmd = command(s), nil
		case "CMD":
			c.Cmd = command(s)
		case "EXPOSE":
			if c.ExposedPorts == nil {
				c.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range s.Args {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				c.ExposedPorts[p] = struct{}{}
			}
		case "LABEL":
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			for i := 0; i < len(s.Args); i += 2 {
				c.Labels[s.Args[i]] = s.Args[i+1]
			}
		}
	}
	return imagecfg.Marshal(c)
}

func command(s Instruction) []string {
	if s.JSON {
		return s.Args
	}
	return []string{"/bin/sh", "-c", s.Args[0]}
}
