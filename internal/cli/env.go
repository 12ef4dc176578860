package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/hostbin"
	space "github.com/spacesandbox/space/sdk/go"
)

// DefaultAPIURL is the server the CLI talks to when SPACE_API_URL is not set.
const DefaultAPIURL = "http://127.0.0.1:7070"

// env is what one CLI invocation works with: its streams and the server it talks to.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	apiURL         string
	apiKey         string
	keySource      string // where apiKey came from, or where it was looked for
	c              *space.Client
}

// newEnv reads the CLI's configuration from the process environment.
func newEnv(stdin io.Reader, stdout, stderr io.Writer) *env {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, apiURL: os.Getenv("SPACE_API_URL")}
	if e.apiURL == "" {
		e.apiURL = DefaultAPIURL
	}
	e.apiKey, e.keySource = apiKey()
	e.c = space.NewClient(e.apiURL, e.apiKey, space.WithUserAgent("space-cli"))
	return e
}

// apiKey returns SPACE_API_KEY, else the content of DATA/admin.key, and where it
// came from (or the file it looked for).
func apiKey() (key, source string) {
	if k := os.Getenv("SPACE_API_KEY"); k != "" {
		return k, "SPACE_API_KEY"
	}
	dir, err := DataDir()
	if err != nil {
		return "", "SPACE_API_KEY"
	}
	path := filepath.Join(dir, "admin.key")
	f, err := os.Open(path)
	if err != nil {
		return "", path
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", path
	}
	return strings.TrimSpace(string(b)), path
}

// DataDir returns SPACE's data directory: $SPACE_DATA_DIR, else /var/lib/space
// for root, else ~/.local/share/space.
func DataDir() (string, error) { return hostbin.DefaultDataDir() }

// message turns an error into the text after "space: ". API errors show the
// server's message; a refused key adds where the CLI looked for one.
func (e *env) message(err error) string {
	var ae *space.APIError
	var se *space.StreamError
	switch {
	case errors.As(err, &ae):
		msg := printable(ae.Message)
		if ae.Code == sandboxv1.CodeUnauthenticated {
			if e.apiKey == "" {
				msg += fmt.Sprintf(" (no API key: set SPACE_API_KEY or make %s readable)", e.keySource)
			} else {
				msg += fmt.Sprintf(" (API key from %s)", e.keySource)
			}
		}
		return msg
	case errors.As(err, &se):
		return printable(se.Message)
	}
	return printable(err.Error())
}
