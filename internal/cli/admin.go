package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/progress"
)

func init() {
	commands = append(commands,
		&command{path: "template build", args: "NAME (--from DIR|TAR|dir:PATH|tar:PATH|oci:LAYOUT[#REF]|docker-archive:FILE[#TAG]|debootstrap:SUITE[+pkg,…] | --dockerfile FILE [--context DIR] [--build-arg K=V]... [--no-cache] [--build-runtime vm|ns]) [--egress FILE] [--wait DUR] [-o json]",
			summary: "build a template and wait, showing progress on stderr", run: templateBuild},
		&command{path: "template list", args: "[-o json]", summary: "list templates", run: templateList},
		&command{path: "template cache", args: "list | prune [NAME]",
			summary: "list the Dockerfile step cache's holders (stopped sandboxes holding the cached steps' snapshots), or delete them: all, or those of template NAME's builds", run: templateCache},
		&command{path: "template gc", args: "[--older-than DUR]",
			summary: "delete the templates images were imported as (dfimg-…, e2bimg-…) that no sandbox uses, created more than DUR ago (default 168h); every build FROM an image does this too (admin key)", run: templateGC},
		&command{path: "template delete", args: "NAME", summary: "delete a template", run: templateDelete},
		&command{path: "template egress", args: "NAME (--set FILE | --clear)",
			summary: "set (or clear) the default egress policy of sandboxes made from a template; their own policy wins", run: templateEgress},
		&command{path: "tenant create", args: "NAME [-o json]", summary: "create a tenant; prints its first API key (admin key)", run: tenantCreate},
		&command{path: "tenant list", args: "[-o json]", summary: "list tenants (admin key)", run: tenantList},
		&command{path: "tenant delete", args: "ID", summary: "delete a tenant (admin key)", run: tenantDelete},
		&command{path: "tenant quota", args: "ID [--max-sandboxes N] [--max-memory-mib N] [--max-cpus N] [-o json]",
			summary: "show or set a tenant's quota on its running sandboxes, their memory and CPUs; 0 is unlimited, limits not named are kept (admin key)", run: tenantQuota},
		&command{path: "signing-key list", args: "[-o json]", summary: "list the capability signing keys (admin key)", run: signingKeyList},
		&command{path: "signing-key rotate", args: "[-o json]", summary: "make a new capability signing key, published to nodes now and signing after 10 s; prints its id (admin key)", run: signingKeyRotate},
		&command{path: "tenant encryption-keys", args: "ID [-o json]", summary: "list a tenant's encryption keys, which wrap everything its sandboxes put in object storage (admin key)", run: tenantEncryptionKeys},
		&command{path: "tenant revoke-encryption-key", args: "ID KEY", summary: "revoke a tenant's encryption key: its hibernated sandboxes and uploaded snapshots become unrestorable (admin key)", run: tenantRevokeEncryptionKey},
		&command{path: "key create", args: "[--tenant T] [-o json]", summary: "create an API key; prints its secret", run: keyCreate},
		&command{path: "key list", args: "[-o json]", summary: "list API keys", run: keyList},
		&command{path: "key revoke", args: "ID", summary: "revoke an API key", run: keyRevoke},
		&command{path: "key delete", args: "ID", summary: "revoke an API key (same as revoke)", run: keyRevoke},
	)
}

// templateBuildWait bounds a template build; debootstrap takes minutes.
const templateBuildWait = time.Hour

func templateBuild(ctx context.Context, e *env, args []string) error {
	fs := newFlags("template build")
	from := fs.String("from", "", "source (required): a directory or tar file here, dir:PATH, tar:PATH on the server, oci:LAYOUT[#REF] (an OCI image layout directory; REF a ref.name annotation or sha256 digest, default the only linux image for this machine), docker-archive:FILE[#TAG] (docker save output), debootstrap:SUITE[+pkg,…], or builtin:NAME (minimal, base, code-interpreter); an image's User/Env/WorkingDir/Entrypoint/Cmd go to /etc/space/image-config.json")
	egressFile := fs.String("egress", "", "default egress policy of its sandboxes: a JSON file, - for stdin (docs/network.md)")
	dockerfileFlag := fs.String("dockerfile", "", "build from a Dockerfile instead of --from: FROM a SPACE template, then RUN, COPY, ADD (local files), ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD, ENTRYPOINT, run in a build sandbox (--build-runtime; docs/dockerfile.md)")
	contextFlag := fs.String("context", ".", "with --dockerfile: the directory COPY and ADD read from; nothing outside it is read")
	buildArgs := kvFlag{}
	fs.Var(buildArgs, "build-arg", "with --dockerfile: K=V, the value of ARG K (repeatable)")
	buildRuntime := fs.String("build-runtime", "", "with --dockerfile: the build sandbox's runtime, vm or ns (default: the server's default runtime, as for sandbox create); the template serves both")
	noCache := fs.Bool("no-cache", false, "with --dockerfile: run every step, reusing no cached step (the new steps are still cached)")
	wait := durationFlag(fs, "wait", templateBuildWait, "how long to wait for the build")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "NAME"); err != nil {
		return err
	}
	if *dockerfileFlag == "" && (len(buildArgs) > 0 || *noCache || *buildRuntime != "") {
		return usagef(fs, "--build-arg, --no-cache and --build-runtime go with --dockerfile")
	}
	if *buildRuntime != "" && *buildRuntime != "vm" && *buildRuntime != "ns" {
		return usagef(fs, "--build-runtime %q: want vm or ns", *buildRuntime)
	}
	if *dockerfileFlag != "" {
		if *from != "" {
			return usagef(fs, "--from and --dockerfile: give one")
		}
		var pol []byte
		if *egressFile != "" {
			p, err := readEgressPolicy(e, *egressFile)
			if err != nil {
				return fmt.Errorf("--egress %s: %w", *egressFile, err)
			}
			if pol, err = json.Marshal(p); err != nil {
				return err
			}
		}
		began := time.Now()
		t, err := dockerfileBuild(ctx, e, dockerfileJob{
			name: pos[0], file: *dockerfileFlag, contextDir: *contextFlag, runtime: *buildRuntime,
			egress: pol, buildArgs: buildArgs, noCache: *noCache,
		}, *wait)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "template %s ready (%s, %s)\n", printable(t.Name), humanBytes(t.SizeBytes), time.Since(began).Round(time.Second))
		if out.json() {
			return writeJSON(e.stdout, t)
		}
		return nil
	}
	if *from == "" {
		return usagef(fs, "missing --from (or --dockerfile)")
	}
	src, err := templateSource(*from)
	if err != nil {
		return err
	}
	req := sandboxv1.BuildTemplateRequest{Name: pos[0], From: src}
	if *egressFile != "" {
		p, err := readEgressPolicy(e, *egressFile)
		if err != nil {
			return fmt.Errorf("--egress %s: %w", *egressFile, err)
		}
		if req.Egress, err = json.Marshal(p); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	t, err := e.c.BuildTemplate(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "building template %s from %s\n", printable(t.Name), printable(src))
	p := &buildProgress{e: e, began: time.Now(), bar: progress.RendererFor(e.stderr)}
	if t.State != "ready" {
		t, err = e.c.WaitForTemplate(ctx, pos[0], p.show)
		p.bar.Done()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "template %s ready (%s, %s)\n", printable(t.Name), humanBytes(t.SizeBytes), time.Since(p.began).Round(time.Second))
	if out.json() {
		return writeJSON(e.stdout, t)
	}
	return nil
}

// templateEgress sets or clears a template's default egress policy and
// prints the template.
func templateEgress(ctx context.Context, e *env, args []string) error {
	fs := newFlags("template egress")
	set := fs.String("set", "", "the JSON policy file (- reads stdin)")
	clearIt := fs.Bool("clear", false, "remove the template's policy (the server's default applies)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "NAME"); err != nil {
		return err
	}
	if (*set == "") == !*clearIt {
		return usagef(fs, "give exactly one of --set FILE and --clear")
	}
	var p *sandboxv1.EgressPolicy
	if *set != "" {
		if p, err = readEgressPolicy(e, *set); err != nil {
			return fmt.Errorf("--set %s: %w", *set, err)
		}
	}
	t, err := e.c.SetTemplateEgress(ctx, pos[0], p)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, t)
}

// buildProgress prints a template build's progress on stderr: the build's
// readings (a bar on a terminal, a line per new reading elsewhere), and
// for a server that records none each change of state and a line every
// 15 s while it lasts.
type buildProgress struct {
	e         *env
	began     time.Time
	bar       *progress.Renderer
	lastState string
	lastShown time.Time
}

// show is WaitForTemplate's progress callback.
func (p *buildProgress) show(t sandboxv1.Template) {
	if t.Progress != nil {
		p.bar.Show(progress.Report(*t.Progress))
		return
	}
	if t.State == p.lastState && time.Since(p.lastShown) < 15*time.Second {
		return
	}
	p.lastState, p.lastShown = t.State, time.Now()
	fmt.Fprintf(p.e.stderr, "template %s: %s (%s)\n", printable(t.Name), printable(t.State), time.Since(p.began).Round(time.Second))
}

// templateSource turns --from into the server's source syntax: a known prefix
// is kept (its local path made absolute), builtin:NAME is the server's
// built-in template NAME (minimal, base, code-interpreter), a bare path
// becomes dir: or tar: after looking at it here.
func templateSource(from string) (string, error) {
	if strings.HasPrefix(from, "debootstrap:") {
		return from, nil
	}
	if name, ok := strings.CutPrefix(from, "builtin:"); ok {
		return name, nil
	}
	for _, prefix := range []string{"dir:", "tar:", "oci:", "docker-archive:"} {
		if p, ok := strings.CutPrefix(from, prefix); ok {
			ref := ""
			if prefix == "oci:" || prefix == "docker-archive:" {
				if i := strings.IndexByte(p, '#'); i >= 0 {
					p, ref = p[:i], p[i:]
				}
			}
			abs, err := filepath.Abs(p)
			if err != nil {
				return "", fmt.Errorf("--from %s: %w", from, err)
			}
			return prefix + abs + ref, nil
		}
	}
	abs, err := filepath.Abs(from)
	if err != nil {
		return "", fmt.Errorf("--from %s: %w", from, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--from %s: %w; name a directory or tar file here, or write dir:, tar:, oci:, docker-archive: or debootstrap:", from, err)
	}
	if fi.IsDir() {
		return "dir:" + abs, nil
	}
	return "tar:" + abs, nil
}

// humanBytes prints a size in binary units.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func templateList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("template list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListTemplates(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.TemplateList{Templates: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, t := range list {
		rows = append(rows, []string{t.Name, t.State, humanBytes(t.SizeBytes), t.Source, formatTime(t.CreatedAt), templateDetail(t)})
	}
	return writeTable(e.stdout, []string{"NAME", "STATE", "SIZE", "SOURCE", "CREATED", "PROGRESS"}, rows)
}

// templateDetail is the PROGRESS cell of a template: how far a build has
// come, why one failed, nothing for a ready template.
func templateDetail(t sandboxv1.Template) string {
	switch {
	case t.State == "failed":
		return truncate(t.Reason, 60)
	case t.State != "building":
		return ""
	case t.Progress == nil:
		return ""
	}
	p := t.Progress
	cell := p.Phase
	switch {
	case p.Total > 0 && p.Unit == "bytes":
		cell += fmt.Sprintf(" %d%% (%s of %s)", 100*p.Done/p.Total, humanBytes(p.Done), humanBytes(p.Total))
	case p.Total > 0:
		cell += fmt.Sprintf(" %d%% (%d/%d %s)", 100*p.Done/p.Total, p.Done, p.Total, p.Unit)
	case p.Unit == "bytes":
		cell += " " + humanBytes(p.Done)
	case p.Done > 0:
		cell += fmt.Sprintf(" %d %s", p.Done, p.Unit)
	}
	return cell
}

// listFlags parses a command that takes only -o.
func listFlags(name string, args []string) (*outputFormat, error) {
	fs := newFlags(name)
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	return out, wantArgs(fs, pos, 0, 0)
}

// oneArgOutput parses a command that takes exactly one positional argument
// and -o.
func oneArgOutput(name, what string, args []string) (string, *outputFormat, error) {
	fs := newFlags(name)
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", nil, err
	}
	if err := wantArgs(fs, pos, 1, 1, what); err != nil {
		return "", nil, err
	}
	return pos[0], out, nil
}

// oneArg parses a command that takes exactly one positional argument.
func oneArg(name, what string, args []string) (string, error) {
	fs := newFlags(name)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", err
	}
	if err := wantArgs(fs, pos, 1, 1, what); err != nil {
		return "", err
	}
	return pos[0], nil
}

func templateDelete(ctx context.Context, e *env, args []string) error {
	name, err := oneArg("template delete", "NAME", args)
	if err != nil {
		return err
	}
	return e.c.DeleteTemplate(ctx, name)
}

func tenantCreate(ctx context.Context, e *env, args []string) error {
	arg, out, err := oneArgOutput("tenant create", "NAME", args)
	if err != nil {
		return err
	}
	res, err := e.c.CreateTenant(ctx, arg)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, res)
	}
	return writeLine(e.stdout, res.Key)
}

func tenantList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("tenant list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListTenants(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.TenantList{Tenants: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, t := range list {
		rows = append(rows, []string{t.ID, t.Name, formatTime(t.CreatedAt)})
	}
	return writeTable(e.stdout, []string{"ID", "NAME", "CREATED"}, rows)
}

func tenantDelete(ctx context.Context, e *env, args []string) error {
	id, err := oneArg("tenant delete", "ID", args)
	if err != nil {
		return err
	}
	return e.c.DeleteTenant(ctx, id)
}

func tenantQuota(ctx context.Context, e *env, args []string) error {
	fs := newFlags("tenant quota")
	maxSandboxes := fs.Int("max-sandboxes", 0, "most sandboxes holding resources (not hibernated, stopped or failed); 0: unlimited")
	maxMemory := fs.Int("max-memory-mib", 0, "most MiB of memory those sandboxes hold together; 0: unlimited")
	maxCPUs := fs.Int("max-cpus", 0, "most CPUs those sandboxes hold together; 0: unlimited")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	t, err := findTenant(ctx, e, pos[0])
	if err != nil {
		return err
	}
	// Limits not named keep their value; a negative one is the server's to
	// refuse.
	set := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "max-sandboxes":
			t.Quota.MaxSandboxes, set = *maxSandboxes, true
		case "max-memory-mib":
			t.Quota.MaxMemoryMiB, set = *maxMemory, true
		case "max-cpus":
			t.Quota.MaxCPUs, set = *maxCPUs, true
		}
	})
	if set {
		if t, err = e.c.SetTenantQuota(ctx, pos[0], t.Quota); err != nil {
			return err
		}
	}
	if out.json() {
		return writeJSON(e.stdout, t)
	}
	limit := func(v int) string {
		if v == 0 {
			return "unlimited"
		}
		return strconv.Itoa(v)
	}
	return writeTable(e.stdout, []string{"LIMIT", "QUOTA", "USED"}, [][]string{
		{"sandboxes", limit(t.Quota.MaxSandboxes), strconv.Itoa(t.Usage.Sandboxes)},
		{"memory-mib", limit(t.Quota.MaxMemoryMiB), strconv.Itoa(t.Usage.MemoryMiB)},
		{"cpus", limit(t.Quota.MaxCPUs), strconv.Itoa(t.Usage.CPUs)},
	})
}

// findTenant returns tenant id from the tenant list.
func findTenant(ctx context.Context, e *env, id string) (*sandboxv1.Tenant, error) {
	list, err := e.c.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range list {
		if t.ID == id {
			return &t, nil
		}
	}
	return nil, fmt.Errorf("tenant %s does not exist; `space tenant list` shows the tenants", id)
}

func keyCreate(ctx context.Context, e *env, args []string) error {
	fs := newFlags("key create")
	var req sandboxv1.CreateKeyRequest
	fs.StringVar(&req.Tenant, "tenant", "", "tenant of the key (default: the caller's)")
	fs.BoolVar(&req.E2B, "e2b", false, "mint the key in E2B's shape, e2b_ and 40 hex, for E2B SDKs that check it (docs/e2b.md)")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	res, err := e.c.CreateKey(ctx, req)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, res)
	}
	return writeLine(e.stdout, res.Secret)
}

func keyList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("key list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListKeys(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.APIKeyList{Keys: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, k := range list {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = formatTime(*k.RevokedAt)
		}
		rows = append(rows, []string{k.ID, k.Tenant, k.Prefix, strconv.FormatBool(k.Admin), formatTime(k.CreatedAt), revoked})
	}
	return writeTable(e.stdout, []string{"ID", "TENANT", "PREFIX", "ADMIN", "CREATED", "REVOKED"}, rows)
}

func keyRevoke(ctx context.Context, e *env, args []string) error {
	id, err := oneArg("key revoke", "ID", args)
	if err != nil {
		return err
	}
	return e.c.RevokeKey(ctx, id)
}

func tenantEncryptionKeys(ctx context.Context, e *env, args []string) error {
	id, out, err := oneArgOutput("tenant encryption-keys", "ID", args)
	if err != nil {
		return err
	}
	keys, err := e.c.ListEncryptionKeys(ctx, id)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.EncryptionKeyList{Keys: nonNil(keys)})
	}
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = formatTime(*k.RevokedAt)
		}
		rows = append(rows, []string{k.ID, formatTime(k.CreatedAt), revoked})
	}
	return writeTable(e.stdout, []string{"ID", "CREATED", "REVOKED"}, rows)
}

func tenantRevokeEncryptionKey(ctx context.Context, e *env, args []string) error {
	fs := newFlags("tenant revoke-encryption-key")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "KEY"); err != nil {
		return err
	}
	return e.c.RevokeEncryptionKey(ctx, pos[0], pos[1])
}

func signingKeyList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("signing-key list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListSigningKeys(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, list)
	}
	rows := make([][]string, 0, len(list.Keys))
	for _, k := range list.Keys {
		state := "published"
		switch {
		case k.DroppedAt != nil:
			state = "dropped"
		case k.RetiredAt != nil:
			state = "retired"
		case k.Signing:
			state = "signing"
		}
		rows = append(rows, []string{k.ID, state, formatTime(k.CreatedAt), formatTime(k.ActiveAt)})
	}
	return writeTable(e.stdout, []string{"ID", "STATE", "CREATED", "SIGNS FROM"}, rows)
}

func signingKeyRotate(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("signing-key rotate", args)
	if err != nil {
		return err
	}
	k, err := e.c.RotateSigningKey(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, k)
	}
	return writeLine(e.stdout, k.ID)
}
