package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// repoRoot is the module root, where ./cmd/space is.
const repoRoot = "../.."

// libraryEnv are variables the manifests set for libraries SPACE uses rather
// than for SPACE's own code, which the source scan cannot see.
var libraryEnv = map[string]string{
	"PGPASSWORD":            "the PostgreSQL driver's password (libpq convention, honoured by pgx)",
	"AWS_ACCESS_KEY_ID":     "the S3 client's access key (AWS SDK and minio-go convention)",
	"AWS_SECRET_ACCESS_KEY": "the S3 client's secret key (AWS SDK and minio-go convention)",
}

// fieldSamples stand for downward-API values when arguments are expanded.
var fieldSamples = map[string]string{
	"metadata.name":           "space-node-x7k2p",
	"metadata.namespace":      namespace,
	"metadata.uid":            "3f6c1a52-0000-4000-8000-000000000000",
	"spec.nodeName":           "worker-1",
	"spec.serviceAccountName": "space-node",
	"status.hostIP":           "10.0.0.2",
	"status.podIP":            "10.244.1.7",
}

// spaceVerb returns the `space` verb c runs ("server", "node", ...), or ""
// when c does not run the space binary.
func spaceVerb(c *corev1.Container) string {
	verb, _ := spaceCommand(c)
	return verb
}

// spaceCommand splits c's command line into the space verb and its flags.
// The image's entrypoint is space, so an empty command runs it too.
func spaceCommand(c *corev1.Container) (verb string, flags []string) {
	line := slices.Concat(c.Command, c.Args)
	if len(c.Command) > 0 {
		if filepath.Base(c.Command[0]) != "space" {
			return "", nil
		}
		line = line[1:]
	}
	if len(line) == 0 {
		return "", nil
	}
	return line[0], line[1:]
}

// expand does what the kubelet does to command and args: $(NAME) becomes the
// value of the container's variable NAME, $$ becomes $, anything else stays.
// It reports the names it could not resolve (the kubelet leaves them as
// they are, which is never what was meant).
func expand(s string, env map[string]string) (string, []string) {
	var out strings.Builder
	var missing []string
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			out.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			out.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				out.WriteString(s[i:])
				return out.String(), missing
			}
			name := s[i+2 : i+end]
			if v, ok := env[name]; ok {
				out.WriteString(v)
			} else {
				out.WriteString(s[i : i+end+1])
				missing = append(missing, name)
			}
			i += end
		default:
			out.WriteByte('$')
		}
	}
	return out.String(), missing
}

// containerEnv resolves c's variables as the kubelet would: literal values,
// ConfigMap values from the manifests, samples for the downward API, and a
// placeholder for Secret values.
func containerEnv(objs []*object, c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		v, _ := expand(e.Value, env)
		if f := e.ValueFrom; f != nil {
			switch {
			case f.ConfigMapKeyRef != nil:
				if o := find(objs, "ConfigMap", f.ConfigMapKeyRef.Name); o != nil {
					v = o.obj.(*corev1.ConfigMap).Data[f.ConfigMapKeyRef.Key]
				}
			case f.SecretKeyRef != nil:
				v = "secret-" + f.SecretKeyRef.Key
			case f.FieldRef != nil:
				v = fieldSamples[f.FieldRef.FieldPath]
			}
		}
		env[e.Name] = v
	}
	return env
}

var flagArg = regexp.MustCompile(`^--[a-z0-9][a-z0-9-]*=`)

// spaceBinary builds ./cmd/space into dir, with the binaries its
// node-manager and host-bridge verbs run beside it; `make test` has just
// built the same packages, so these are links from the build cache.
func spaceBinary(t *testing.T, dir string) string {
	t.Helper()
	for _, name := range []string{"space", "space-node-manager", "space-host-bridge"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	return filepath.Join(dir, "space")
}

// checkFlags parses args with the real flag set of `space VERB`: it runs the
// binary with the arguments and a final -help, which the flag package
// reaches only when every argument before it is a defined flag with a value
// of the right type, and which makes the verb print its usage and exit 2
// before it does anything else.
func checkFlags(bin, verb string, args []string) error {
	for _, a := range args {
		if !flagArg.MatchString(a) {
			// A bare value would end flag parsing: -help would become a
			// positional argument and the service would start.
			return fmt.Errorf("argument %q: write flags as --name=value", a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home, err := os.MkdirTemp("", "space-flags-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bin, slices.Concat([]string{verb}, args, []string{"-help"})...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "SPACE_DATA_DIR=" + home}
	cmd.Dir = home
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	first, _, _ := strings.Cut(stderr.String(), "\n")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || first != "Usage of "+verb+":" {
		return fmt.Errorf("space %s %s: %v: %s", verb, strings.Join(args, " "), err, first)
	}
	return nil
}

// TestSpaceCommands checks every container that runs `space` against the
// binary built from this source: the verb exists, each flag exists and its
// value parses, $(VAR) references resolve, file paths lie on a mounted
// volume, --listen and --advertise name a declared container port, and the
// node's --server names a Service port of the manifests.
func TestSpaceCommands(t *testing.T) {
	objs := loadObjects(t)
	bin := spaceBinary(t, t.TempDir())
	verbs := map[string]bool{}
	for _, w := range workloads(objs) {
		for _, c := range slices.Concat(w.spec.Spec.InitContainers, w.spec.Spec.Containers) {
			verb, raw := spaceCommand(&c)
			if verb == "" {
				continue
			}
			verbs[verb] = true
			t.Run(w.obj.meta.GetName()+"/"+c.Name, func(t *testing.T) {
				env := containerEnv(objs, &c)
				args := make([]string, len(raw))
				for i, a := range raw {
					var missing []string
					if args[i], missing = expand(a, env); len(missing) > 0 {
						t.Errorf("argument %q: $(%s) is no variable of the container", a, strings.Join(missing, "), $("))
					}
				}
				if err := checkFlags(bin, verb, args); err != nil {
					t.Error(err)
				}
				checkFlagValues(t, objs, &c, args)
			})
		}
	}
	for _, v := range []string{"server", "node", "node-manager"} {
		if !verbs[v] {
			t.Errorf("no container runs `space %s`", v)
		}
	}
	// The check above means something only if it can fail.
	t.Run("rejects", func(t *testing.T) {
		for _, args := range [][]string{
			{"--listen=:7070", "--no-such-flag=1"},
			{"--snapshot-every=soon"},
			{"--listen", ":7070"},
		} {
			if err := checkFlags(bin, "server", args); err == nil {
				t.Errorf("space server %v: accepted", args)
			}
		}
		if err := checkFlags(bin, "no-such-verb", nil); err == nil {
			t.Error("space no-such-verb: accepted")
		}
	})
}

// checkFlagValues checks what the flag set cannot: that paths are on
// volumes, listen addresses on declared ports, and URLs on the manifests'
// Services.
func checkFlagValues(t *testing.T, objs []*object, c *corev1.Container, args []string) {
	t.Helper()
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case strings.HasPrefix(value, "/"):
			// Data, sockets and keys: on the root filesystem they would be
			// lost with the container, or unwritable.
			if mountOf(c, value) == nil {
				t.Errorf("--%s=%s: not on a mounted volume", name, value)
			}
		case name == "server":
			checkServiceURL(t, objs, a, value)
		case name == "listen" || name == "advertise":
			// What the process listens on is what the Service, the probes
			// and the network policies reach: a declared container port.
			_, port, err := net.SplitHostPort(value)
			n, perr := strconv.ParseInt(port, 10, 32)
			if err != nil || perr != nil {
				t.Errorf("%s: want HOST:PORT (or :PORT)", a)
			} else if _, err := containerPort(c, "", int32(n)); err != nil {
				t.Errorf("%s: %v", a, err)
			}
		}
	}
}

// mountOf returns the mount of c that holds path, or nil.
func mountOf(c *corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			if best == nil || len(m.MountPath) > len(best.MountPath) {
				best = &c.VolumeMounts[i]
			}
		}
	}
	return best
}

// checkServiceURL checks that an in-cluster URL (http://SERVICE:PORT or
// SERVICE.NAMESPACE…) names a Service of the manifests and one of its ports.
func checkServiceURL(t *testing.T, objs []*object, arg, value string) {
	t.Helper()
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		t.Errorf("%s: not a URL", arg)
		return
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Errorf("%s: want an explicit port: %v", arg, err)
		return
	}
	svcName, rest, _ := strings.Cut(host, ".")
	if rest != "" && !strings.HasPrefix(rest, namespace+".") && rest != namespace {
		return // outside the manifests
	}
	o := find(objs, "Service", svcName)
	if o == nil {
		t.Errorf("%s: no Service %s in the manifests", arg, svcName)
		return
	}
	if !slices.ContainsFunc(o.obj.(*corev1.Service).Spec.Ports, func(p corev1.ServicePort) bool {
		return fmt.Sprint(p.Port) == port
	}) {
		t.Errorf("%s: Service %s has no port %s", arg, svcName, port)
	}
}

// spaceEnvNames scans the non-test Go source of cmd/ and internal/ for the
// SPACE_* variable names it mentions.
func spaceEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`"(SPACE_[A-Z0-9_]+)"`)
	names := map[string]bool{}
	for _, dir := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				names[string(m[1])] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !names["SPACE_JOIN_TOKEN"] {
		t.Fatalf("the source scan found no SPACE_JOIN_TOKEN in cmd/ or internal/ (found %v): is %s the module root?", names, repoRoot)
	}
	return names
}

// TestEnvVarsAreUsed checks that every variable a container sets is read by
// something: SPACE's code (SPACE_*, found in the source), the container's
// own arguments ($(NAME), or $NAME in a shell script), or a library
// (libraryEnv). A misspelt name is otherwise silently ignored.
func TestEnvVarsAreUsed(t *testing.T) {
	known := spaceEnvNames(t)
	for _, w := range workloads(loadObjects(t)) {
		for _, c := range slices.Concat(w.spec.Spec.InitContainers, w.spec.Spec.Containers) {
			line := strings.Join(slices.Concat(c.Command, c.Args), "\n")
			for _, e := range c.Env {
				_, lib := libraryEnv[e.Name]
				inArgs := strings.Contains(line, "$("+e.Name+")")
				inScript := spaceVerb(&c) == "" && (strings.Contains(line, "$"+e.Name) || strings.Contains(line, "${"+e.Name+"}"))
				read := known[e.Name] && spaceVerb(&c) != ""
				if !lib && !inArgs && !inScript && !read {
					t.Errorf("%v container %s: env %s is read by nothing (not by space, not in the arguments, not in libraryEnv)", w.obj, c.Name, e.Name)
				}
			}
		}
	}
}

// spaceFlags returns the expanded --name=value flags of the container of a
// workload that runs `space verb`, with the container.
func spaceFlags(objs []*object, w workload, verb string) (*corev1.Container, map[string]string) {
	for i := range w.spec.Spec.Containers {
		c := &w.spec.Spec.Containers[i]
		v, raw := spaceCommand(c)
		if v != verb {
			continue
		}
		env := containerEnv(objs, c)
		flags := map[string]string{}
		for _, a := range raw {
			a, _ = expand(a, env)
			name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			flags[name] = value
		}
		return c, flags
	}
	return nil, nil
}

// effectiveUID is the uid c runs as (container setting, else the pod's);
// -1 when neither says.
func effectiveUID(pod *corev1.PodSpec, c *corev1.Container) int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return *c.SecurityContext.RunAsUser
	}
	if pod.SecurityContext != nil && pod.SecurityContext.RunAsUser != nil {
		return *pod.SecurityContext.RunAsUser
	}
	return -1
}

// TestNodeWiring checks what ties the processes together, which neither the
// schema nor one flag set sees: `space node` reaches the node-manager's
// socket through a volume both containers mount and runs as a uid the
// node-manager allows; the nodes use the control plane's KMS directory and
// object store, as the same uid (the KMS directory is private to its owner).
func TestNodeWiring(t *testing.T) {
	objs := loadObjects(t)
	var server, nodes *workload
	for _, w := range workloads(objs) {
		if c, _ := spaceFlags(objs, w, "server"); c != nil {
			server = &w
		}
		if c, _ := spaceFlags(objs, w, "node"); c != nil {
			nodes = &w
		}
	}
	if server == nil || nodes == nil {
		t.Fatalf("want a workload running `space server` and one running `space node` (server %v, node %v)", server != nil, nodes != nil)
	}
	nc, nf := spaceFlags(objs, *nodes, "node")
	mc, mf := spaceFlags(objs, *nodes, "node-manager")
	if mc == nil {
		t.Fatalf("%v: no node-manager container beside `space node`", nodes.obj)
	}
	if mf["socket"] == "" || mf["socket"] != nf["node-manager"] {
		t.Errorf("node-manager --socket=%q, node --node-manager=%q: want the same path", mf["socket"], nf["node-manager"])
	} else if a, b := mountOf(mc, mf["socket"]), mountOf(nc, nf["node-manager"]); a == nil || b == nil || a.Name != b.Name || a.MountPath != b.MountPath {
		t.Errorf("the node-manager socket %s is not on one volume mounted at one path in both containers", mf["socket"])
	}
	nodeUID := effectiveUID(&nodes.spec.Spec, nc)
	if nodeUID <= 0 {
		t.Errorf("`space node` runs as uid %d: want a fixed non-root uid", nodeUID)
	}
	for _, u := range strings.Split(mf["allow-uid"], ",") {
		if _, err := strconv.ParseUint(strings.TrimSpace(u), 10, 32); err != nil {
			t.Errorf("node-manager --allow-uid=%q: %q is not a uid", mf["allow-uid"], u)
		}
	}
	if !slices.Contains(strings.Split(mf["allow-uid"], ","), fmt.Sprint(nodeUID)) {
		t.Errorf("node-manager --allow-uid=%q does not allow uid %d, which `space node` runs as", mf["allow-uid"], nodeUID)
	}
	sc, sf := spaceFlags(objs, *server, "server")
	if sf["kms-dir"] == "" || sf["kms-dir"] != nf["kms-dir"] {
		t.Errorf("server --kms-dir=%q, node --kms-dir=%q: the nodes must use the control plane's KMS", sf["kms-dir"], nf["kms-dir"])
	} else if a, b := mountOf(sc, sf["kms-dir"]), mountOf(nc, nf["kms-dir"]); a == nil || b == nil || a.MountPath != b.MountPath ||
		claimOf(server.spec, a.Name) == "" || claimOf(server.spec, a.Name) != claimOf(nodes.spec, b.Name) {
		t.Errorf("--kms-dir=%s is not on one shared PersistentVolumeClaim mounted at one path by the server and the nodes", sf["kms-dir"])
	}
	if sf["object-store"] != nf["object-store"] {
		t.Errorf("server --object-store=%q, node --object-store=%q: want the same", sf["object-store"], nf["object-store"])
	}
	if su := effectiveUID(&server.spec.Spec, sc); su != nodeUID {
		t.Errorf("server uid %d, node uid %d: both own files in the shared KMS directory (mode 0700)", su, nodeUID)
	}
}

// claimOf returns the claim the pod's volume name mounts, or "".
func claimOf(spec *corev1.PodTemplateSpec, volume string) string {
	for _, v := range spec.Spec.Volumes {
		if v.Name == volume && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}
