package main

import (
	"log/slog"
	"os"
	"strings"
)

// newLogger returns the process logger: text on stderr, at the level named by
// SPACE_LOG_LEVEL (debug, info, warn, error; default info).
func newLogger() *slog.Logger {
	var level slog.Level
	switch strings.ToLower(os.Getenv("SPACE_LOG_LEVEL")) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
