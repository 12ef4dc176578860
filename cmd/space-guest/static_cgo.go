//go:build cgo && !netgo

// A plain `go build ./cmd/space-guest` on a machine with a C compiler has
// cgo on, and net's cgo resolver would link the daemon against the host's
// libc and dynamic loader, which no sandbox has: every create would fail
// with "exec /.space/space-guest: no such file or directory". This file is
// built only then, and links the daemon statically instead; `make build`
// (CGO_ENABLED=0 -tags osusergo,netgo) leaves it out and builds a smaller
// pure-Go binary. The linker warns that getaddrinfo needs glibc's shared
// libraries at run time: the netdns setting below keeps the daemon on Go's
// own resolver, so it never calls it. os/user, the other cgo user, is not
// imported (TestDeps).

//go:debug netdns=go

package main

// #cgo LDFLAGS: -static
import "C"
