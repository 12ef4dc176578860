package main

import (
	"log/slog"

	"github.com/spacesandbox/space/internal/hostbin"
)

// newLogger returns the process logger (hostbin.Logger).
func newLogger() *slog.Logger { return hostbin.Logger() }
