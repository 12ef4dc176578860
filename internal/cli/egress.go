package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
)

func init() {
	commands = append(commands,
		&command{path: "sandbox egress", args: "ID [--set FILE]",
			summary: "print a sandbox's egress policy as JSON, or replace it with the policy in FILE (- for stdin)", run: sandboxEgress},
	)
}

// sandboxEgress prints the sandbox's egress policy, or with --set replaces
// it and prints the policy the server stored.
func sandboxEgress(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox egress")
	set := fs.String("set", "", "replace the policy with the JSON policy in this file (- reads stdin)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	var p *sandboxv1.EgressPolicy
	if *set == "" {
		p, err = e.c.GetEgress(ctx, pos[0])
	} else {
		var in *sandboxv1.EgressPolicy
		if in, err = readEgressPolicy(e, *set); err != nil {
			return fmt.Errorf("--set %s: %w", *set, err)
		}
		p, err = e.c.SetEgress(ctx, pos[0], *in)
	}
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, p)
}

// readEgressPolicy reads a JSON egress policy from path, or from stdin for
// "-". Unknown fields are refused here already, as the server refuses them:
// a misspelt "alow" must not quietly drop the rules under it. The server
// validates the rules themselves.
func readEgressPolicy(e *env, path string) (*sandboxv1.EgressPolicy, error) {
	var r io.Reader
	if path == "-" {
		r = e.stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, egress.MaxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(b) > egress.MaxPolicyBytes {
		return nil, fmt.Errorf("more than %d bytes", egress.MaxPolicyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p sandboxv1.EgressPolicy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("not a JSON egress policy: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("not a JSON egress policy: data after the object")
	}
	return &p, nil
}
