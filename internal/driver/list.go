package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// ListStateDirs returns the names of the directories in dir that are valid
// execution ids, sorted: the executions a driver keeping one directory per
// execution there (StateDir/exec) holds state for. A missing dir holds none.
// Anything else in dir (a file, a name no execution can have) is skipped.
func ListStateDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list executions in %s: %w", dir, err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	slices.Sort(ids)
	return ids, nil
}
