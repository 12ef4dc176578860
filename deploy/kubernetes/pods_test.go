package kubernetes_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Containers allowed more than the restricted Pod Security profile, by
// WORKLOAD/CONTAINER, with the reason; node.yaml explains each in full. A
// container not listed here must run as non-root, with no privilege
// escalation, no capabilities, a read-only root filesystem and memory and
// CPU limits.
var (
	privilegedContainers = map[string]string{
		"space-node/node-manager": "the node's only privileged process: mounts, btrfs, loop devices, namespaces, cgroups, KVM",
	}
	rootContainers = map[string]string{
		"space-node/node-manager": "privileged",
		"space-node/node-dir":     "gives the node's host data directory to the node's uid (CAP_CHOWN, CAP_FOWNER only)",
	}
	writableRootContainers = map[string]string{
		"space-node/node-manager": "apt-get and debootstrap write to the image's /var and /tmp",
	}
	unlimitedContainers = map[string]string{
		"space-node/node-manager": "every sandbox of the host runs in its cgroup",
	}
)

// workload is an object that owns a pod template.
type workload struct {
	obj      *object
	spec     *corev1.PodTemplateSpec
	selector *metav1.LabelSelector
}

// replicas is the workload's replica count; -1 for one pod per node.
func (w workload) replicas() int {
	if d, ok := w.obj.obj.(*appsv1.Deployment); ok {
		if d.Spec.Replicas == nil {
			return 1
		}
		return int(*d.Spec.Replicas)
	}
	return -1
}

func workloads(objs []*object) []workload {
	var out []workload
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, workload{o, &v.Spec.Template, v.Spec.Selector})
		case *appsv1.DaemonSet:
			out = append(out, workload{o, &v.Spec.Template, v.Spec.Selector})
		}
	}
	return out
}

// allContainers returns the init containers and containers of o's pod
// template; nil when o has none.
func allContainers(o *object) []corev1.Container {
	for _, w := range workloads([]*object{o}) {
		return slices.Concat(w.spec.Spec.InitContainers, w.spec.Spec.Containers)
	}
	return nil
}

// splitImage splits REPO[:TAG][@DIGEST].
func splitImage(image string) (name, tag, digest string) {
	name, digest, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	return name, tag, digest
}

func TestImages(t *testing.T) {
	images := map[string]bool{}
	for _, w := range workloads(loadObjects(t)) {
		for _, c := range slices.Concat(w.spec.Spec.InitContainers, w.spec.Spec.Containers) {
			name, tag, digest := splitImage(c.Image)
			switch {
			case name == "":
				t.Errorf("%v container %s: no image", w.obj, c.Name)
			case tag == "" && digest == "":
				t.Errorf("%v container %s: image %q has no tag: it means latest, which changes under a running cluster", w.obj, c.Name, c.Image)
			case tag == "latest":
				t.Errorf("%v container %s: image %q: pin a version, not latest", w.obj, c.Name, c.Image)
			}
			if c.ImagePullPolicy == corev1.PullNever {
				t.Errorf("%v container %s: imagePullPolicy Never", w.obj, c.Name)
			}
			images[c.Image] = true
		}
	}
	// One image holds `space` and everything it runs: two would be two
	// versions of SPACE talking to each other.
	if len(images) != 1 {
		t.Errorf("images %v: want one image for every container", slices.Sorted(maps.Keys(images)))
	}
}

// TestContainerSecurity holds every container to the restricted profile
// unless the lists above name it, and the lists to what the manifests do, so
// that neither drifts.
func TestContainerSecurity(t *testing.T) {
	used := map[string]bool{}
	for _, w := range workloads(loadObjects(t)) {
		pod := &w.spec.Spec
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("%v: automountServiceAccountToken is not false: SPACE never calls the Kubernetes API, so its pods need no token", w.obj)
		}
		if pod.ServiceAccountName == "" || pod.ServiceAccountName == "default" {
			t.Errorf("%v: serviceAccountName %q: give each workload its own", w.obj, pod.ServiceAccountName)
		}
		if pod.HostNetwork || pod.HostPID || pod.HostIPC {
			t.Errorf("%v: hostNetwork %v hostPID %v hostIPC %v: none is needed", w.obj, pod.HostNetwork, pod.HostPID, pod.HostIPC)
		}
		for _, v := range pod.Volumes {
			if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == corev1.HostPathUnset) {
				t.Errorf("%v volume %s: hostPath %s without a type", w.obj, v.Name, v.HostPath.Path)
			}
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			key := w.obj.meta.GetName() + "/" + c.Name
			used[key] = true
			checkContainerSecurity(t, key, pod, &c)
		}
	}
	for _, list := range []map[string]string{privilegedContainers, rootContainers, writableRootContainers, unlimitedContainers} {
		for key := range list {
			if !used[key] {
				t.Errorf("exception for %s, which is no container of the manifests", key)
			}
		}
	}
}

func checkContainerSecurity(t *testing.T, key string, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("%s: no %s request: the scheduler cannot place it", key, r)
		}
	}
	_, unlimited := unlimitedContainers[key]
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !unlimited && (!ok || q.IsZero()) {
		t.Errorf("%s: no memory limit", key)
	} else if unlimited && ok {
		t.Errorf("%s: has a memory limit, but is listed as unlimited (%s)", key, unlimitedContainers[key])
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", key)
		return
	}
	privileged := sc.Privileged != nil && *sc.Privileged
	if _, ok := privilegedContainers[key]; ok != privileged {
		t.Errorf("%s: privileged %v, want %v (privilegedContainers)", key, privileged, ok)
	}
	if !privileged {
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", key)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: capabilities do not drop ALL", key)
		}
	}
	_, root := rootContainers[key]
	if asRoot := runsAsRoot(pod, c); asRoot != root {
		t.Errorf("%s: runs as root %v, want %v (rootContainers)", key, asRoot, root)
	}
	_, writable := writableRootContainers[key]
	if ro := sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem; ro == writable {
		t.Errorf("%s: readOnlyRootFilesystem %v, want %v (writableRootContainers)", key, ro, !writable)
	}
	if sc.SeccompProfile == nil && (pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil) && !privileged {
		t.Errorf("%s: no seccomp profile (RuntimeDefault)", key)
	}
}

// runsAsRoot reports whether c may run as uid 0: it does unless runAsNonRoot
// holds or runAsUser names another uid (container settings win over the
// pod's).
func runsAsRoot(pod *corev1.PodSpec, c *corev1.Container) bool {
	var nonRoot *bool
	var uid *int64
	if psc := pod.SecurityContext; psc != nil {
		nonRoot, uid = psc.RunAsNonRoot, psc.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
	}
	if uid != nil {
		return *uid == 0
	}
	return nonRoot == nil || !*nonRoot
}

// Name and label validation as the API server does it.
func dns1123Subdomain(s string) []string { return validation.IsDNS1123Subdomain(s) }
func dns1035Label(s string) []string     { return validation.IsDNS1035Label(s) }
func labelKey(s string) []string         { return content.IsLabelKey(s) }
func labelValue(s string) []string       { return content.IsLabelValue(s) }

// containerPort finds the port of c that port names (by name or number).
func containerPort(c *corev1.Container, name string, number int32) (corev1.ContainerPort, error) {
	for _, p := range c.Ports {
		if (name != "" && p.Name == name) || (name == "" && p.ContainerPort == number) {
			return p, nil
		}
	}
	if name != "" {
		return corev1.ContainerPort{}, fmt.Errorf("container %s has no port named %q", c.Name, name)
	}
	return corev1.ContainerPort{}, fmt.Errorf("container %s declares no port %d", c.Name, number)
}
