package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// newFlags returns a FlagSet for a command that reports errors instead of exiting.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("space "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses args with fs, allowing flags after positional arguments (as in
// `space sandbox get ID -o json`); everything after "--" is positional as is.
// Missing or extra positionals are checked by the caller with wantArgs.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &usageError{fs: fs, msg: "help", err: flag.ErrHelp}
			}
			return nil, usagef(fs, "%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return append(pos, tail...), nil
}

// wantArgs checks that there are between min and max positional arguments (max
// < 0: no upper bound), naming what is missing.
func wantArgs(fs *flag.FlagSet, pos []string, min, max int, names ...string) error {
	if len(pos) < min {
		return usagef(fs, "missing %s", strings.Join(names[len(pos):min], " and "))
	}
	if max >= 0 && len(pos) > max {
		return usagef(fs, "unexpected argument %q", pos[max])
	}
	return nil
}

// outputFlag adds -o (text or json) to fs.
func outputFlag(fs *flag.FlagSet) *outputFormat {
	o := outputFormat("text")
	fs.Var(&o, "o", "output format: text or json")
	return &o
}

// outputFormat is the value of -o.
type outputFormat string

// String returns the format.
func (o *outputFormat) String() string { return string(*o) }

// Set accepts text or json.
func (o *outputFormat) Set(v string) error {
	if v != "text" && v != "json" {
		return fmt.Errorf("output format %q: want text or json", v)
	}
	*o = outputFormat(v)
	return nil
}

// json reports whether -o json was given.
func (o *outputFormat) json() bool { return *o == "json" }

// kvFlag collects repeated K=V flags into a map.
type kvFlag map[string]string

// String returns the pairs sorted by key.
func (kv kvFlag) String() string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + kv[k]
	}
	return strings.Join(keys, ",")
}

// Set adds one K=V pair.
func (kv kvFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not K=V", v)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("%q contains a NUL byte", v)
	}
	kv[k] = val
	return nil
}

// durationFlag adds a duration flag that must be positive.
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Func(name, fmt.Sprintf("%s (default %s)", usage, def), func(v string) error {
		p, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if p <= 0 {
			return fmt.Errorf("duration %s is not positive", v)
		}
		d = p
		return nil
	})
	return &d
}
