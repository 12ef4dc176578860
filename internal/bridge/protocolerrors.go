package bridge

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// ProtocolErrorsFile is the name the sandbox manager gives Config.ErrorsFile
// in an execution's directory.
const ProtocolErrorsFile = "bridge.errors"

// maxProtocolErrorsFile bounds what ReadProtocolErrors reads: the counts of
// at most a few dozen kinds.
const maxProtocolErrorsFile = 64 << 10

// writeProtocolErrors writes the guest's protocol errors to
// Config.ErrorsFile when there were any. The bridge is the only process
// that saw them; the node reads the file once the bridge is gone.
func (b *Bridge) writeProtocolErrors() {
	counts := b.client.ProtocolErrors()
	if b.cfg.ErrorsFile == "" || len(counts) == 0 {
		return
	}
	body, err := json.Marshal(counts)
	if err == nil {
		err = os.WriteFile(b.cfg.ErrorsFile, body, 0o600)
	}
	if err != nil {
		b.log.Warn("write the guest's protocol errors", "file", b.cfg.ErrorsFile, "err", err)
	}
}

// ReadProtocolErrors reads a bridge's ErrorsFile: the guest's protocol
// errors by kind. A missing file is no errors.
func ReadProtocolErrors(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the host bridge's protocol errors: %w", err)
	}
	defer f.Close()
	var counts map[string]uint64
	if err := json.NewDecoder(io.LimitReader(f, maxProtocolErrorsFile)).Decode(&counts); err != nil {
		return nil, fmt.Errorf("read the host bridge's protocol errors %s: %w", path, err)
	}
	return counts, nil
}
