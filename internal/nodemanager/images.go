package nodemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ImageBuilder makes a disk image (dest) from a template's directory tree, for
// runtimes whose root filesystem is a block device.
type ImageBuilder func(ctx context.Context, dir, dest string) error

// diskImage returns the disk image of a template, building it on first use.
// Concurrent starts of one template share one build.
func (s *Server) diskImage(ctx context.Context, template string) (string, error) {
	if s.cfg.ImageDir == "" || s.cfg.BuildImage == nil || s.cfg.TemplateDir == nil {
		return "", fmt.Errorf("node-manager: no disk images configured")
	}
	dest := filepath.Join(s.cfg.ImageDir, template+".img")
	if _, err := os.Stat(dest); err == nil {
		return dest, nil
	}
	_, err, _ := s.builds.Do("image:"+template, func() (any, error) {
		if _, err := os.Stat(dest); err == nil {
			return nil, nil
		}
		dir, err := s.cfg.TemplateDir(template)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(s.cfg.ImageDir, 0o700); err != nil {
			return nil, err
		}
		tmp := dest + ".building"
		_ = os.Remove(tmp)
		if err := s.cfg.BuildImage(context.WithoutCancel(ctx), dir, tmp); err != nil {
			_ = os.Remove(tmp)
			return nil, fmt.Errorf("template %s: disk image: %w", template, err)
		}
		return nil, os.Rename(tmp, dest)
	})
	if err != nil {
		return "", err
	}
	return dest, nil
}

// removeDiskImage drops a template's disk image, if any.
func (s *Server) removeDiskImage(template string) error {
	if s.cfg.ImageDir == "" {
		return nil
	}
	err := os.Remove(filepath.Join(s.cfg.ImageDir, template+".img"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
