package guestd_test

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

func mkfifo(p string) error { return unix.Mkfifo(p, 0o644) }

func statUID(fi fs.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }
