package kubernetes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// guide is the deployment guide; what the user must create is named there.
const guide = "../../docs/kubernetes.md"

// externalSecrets are Secrets the manifests refer to that no manifest, not
// even a template, defines: the user brings them, and the guide says so.
var externalSecrets = map[string]string{
	"space-tls": "ingress.example.yaml: the TLS certificate of the API and ingress host names",
}

// fieldPaths are the downward-API fields an env var may name.
var fieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.podIP"}

// refs answers whether a referenced object exists, and where it comes from.
type refs struct {
	objs  []*object
	guide string
}

func newRefs(t *testing.T) *refs {
	t.Helper()
	b, err := os.ReadFile(guide)
	if err != nil {
		t.Fatalf("the deployment guide: %v", err)
	}
	return &refs{objs: loadObjects(t), guide: string(b)}
}

// secret checks that the Secret name exists with the keys (a key "" is no
// key): defined by a manifest, or by a template or brought by the user and
// then named in the guide.
func (r *refs) secret(name string, keys ...string) error {
	o := find(r.objs, "Secret", name)
	if o == nil {
		why, ok := externalSecrets[name]
		if !ok {
			return fmt.Errorf("Secret %s is defined by no manifest or template, and is not in externalSecrets", name)
		}
		if !strings.Contains(r.guide, name) {
			return fmt.Errorf("Secret %s (%s) is user-provided but %s does not mention it", name, why, filepath.Base(guide))
		}
		return nil
	}
	if o.example() && !strings.Contains(r.guide, name) {
		return fmt.Errorf("Secret %s comes from the template %s, but %s does not tell how to create it", name, o.file, filepath.Base(guide))
	}
	s := o.obj.(*corev1.Secret)
	for _, k := range keys {
		if k == "" {
			continue
		}
		_, inData := s.Data[k]
		_, inString := s.StringData[k]
		if !inData && !inString {
			return fmt.Errorf("Secret %s (%s) has no key %q", name, o.file, k)
		}
		if o.example() && !strings.Contains(r.guide, k) {
			return fmt.Errorf("Secret %s key %q: %s does not tell how to make it", name, k, filepath.Base(guide))
		}
	}
	return nil
}

// configMap checks that the ConfigMap name is applied with the manifests and
// has the keys.
func (r *refs) configMap(name string, keys ...string) error {
	o := find(r.objs, "ConfigMap", name)
	if o == nil || o.example() {
		return fmt.Errorf("ConfigMap %s is not defined by the applied manifests", name)
	}
	cm := o.obj.(*corev1.ConfigMap)
	for _, k := range keys {
		if _, ok := cm.Data[k]; !ok {
			if _, ok := cm.BinaryData[k]; !ok {
				return fmt.Errorf("ConfigMap %s has no key %q", name, k)
			}
		}
	}
	return nil
}

func (r *refs) exists(kind, name string) error {
	if o := find(r.objs, kind, name); o == nil || o.example() {
		return fmt.Errorf("%s %s is not defined by the applied manifests", kind, name)
	}
	return nil
}

// TestPodReferences checks that what each pod template names exists:
// ServiceAccount, Secrets and ConfigMaps with their keys, claims, volumes,
// downward-API fields and probe ports.
func TestPodReferences(t *testing.T) {
	r := newRefs(t)
	for _, w := range workloads(r.objs) {
		pod := &w.spec.Spec
		if err := r.exists("ServiceAccount", pod.ServiceAccountName); err != nil {
			t.Errorf("%v: serviceAccountName: %v", w.obj, err)
		}
		volumes := map[string]bool{}
		for _, v := range pod.Volumes {
			if volumes[v.Name] {
				t.Errorf("%v: volume %s declared twice", w.obj, v.Name)
			}
			volumes[v.Name] = false
			if err := r.volume(&v); err != nil {
				t.Errorf("%v volume %s: %v", w.obj, v.Name, err)
			}
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			where := fmt.Sprintf("%v container %s", w.obj, c.Name)
			paths := map[string]bool{}
			for _, m := range c.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("%s: mounts volume %s, which the pod does not declare", where, m.Name)
				}
				volumes[m.Name] = true
				if paths[m.MountPath] {
					t.Errorf("%s: two mounts at %s", where, m.MountPath)
				}
				paths[m.MountPath] = true
			}
			for _, e := range c.Env {
				if err := r.env(&e); err != nil {
					t.Errorf("%s env %s: %v", where, e.Name, err)
				}
			}
			for _, e := range c.EnvFrom {
				switch {
				case e.SecretRef != nil:
					if err := r.secret(e.SecretRef.Name); err != nil {
						t.Errorf("%s envFrom: %v", where, err)
					}
				case e.ConfigMapRef != nil:
					if err := r.configMap(e.ConfigMapRef.Name); err != nil {
						t.Errorf("%s envFrom: %v", where, err)
					}
				}
			}
			checkProbes(t, where, &c)
		}
		for name, used := range volumes {
			if !used {
				t.Errorf("%v: volume %s is mounted by no container", w.obj, name)
			}
		}
	}
}

func (r *refs) volume(v *corev1.Volume) error {
	switch {
	case v.Secret != nil:
		if v.Secret.Optional != nil && *v.Secret.Optional {
			return nil
		}
		keys := make([]string, len(v.Secret.Items))
		for i, it := range v.Secret.Items {
			keys[i] = it.Key
		}
		return r.secret(v.Secret.SecretName, keys...)
	case v.ConfigMap != nil:
		keys := make([]string, len(v.ConfigMap.Items))
		for i, it := range v.ConfigMap.Items {
			keys[i] = it.Key
		}
		return r.configMap(v.ConfigMap.Name, keys...)
	case v.PersistentVolumeClaim != nil:
		return r.exists("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName)
	}
	return nil
}

func (r *refs) env(e *corev1.EnvVar) error {
	if e.ValueFrom == nil {
		return nil
	}
	switch f := e.ValueFrom; {
	case f.SecretKeyRef != nil:
		if f.SecretKeyRef.Optional != nil && *f.SecretKeyRef.Optional {
			return nil
		}
		return r.secret(f.SecretKeyRef.Name, f.SecretKeyRef.Key)
	case f.ConfigMapKeyRef != nil:
		return r.configMap(f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key)
	case f.FieldRef != nil:
		if !slices.Contains(fieldPaths, f.FieldRef.FieldPath) {
			return fmt.Errorf("fieldRef %q: not one of %v", f.FieldRef.FieldPath, fieldPaths)
		}
	}
	return nil
}

func checkProbes(t *testing.T, where string, c *corev1.Container) {
	t.Helper()
	for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		if p == nil {
			continue
		}
		var port intstr.IntOrString
		switch {
		case p.HTTPGet != nil:
			port = p.HTTPGet.Port
			if !strings.HasPrefix(p.HTTPGet.Path, "/") {
				t.Errorf("%s %s probe: path %q does not start with /", where, kind, p.HTTPGet.Path)
			}
		case p.TCPSocket != nil:
			port = p.TCPSocket.Port
		case p.GRPC != nil:
			port = intstr.FromInt32(p.GRPC.Port)
		default:
			continue
		}
		if _, err := containerPort(c, portName(port), port.IntVal); err != nil {
			t.Errorf("%s %s probe: port %s: %v", where, kind, port.String(), err)
		}
	}
	if spaceVerb(c) == "server" {
		for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if (p != nil || kind != "startup") && (p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz") {
				t.Errorf("%s: `space server` needs its %s probe to be GET /healthz (SPEC.md: ready when it answers 200)", where, kind)
			}
		}
	}
}

func portName(p intstr.IntOrString) string {
	if p.Type == intstr.String {
		return p.StrVal
	}
	return ""
}

// selected returns the workloads whose pod labels sel matches.
func selected(t *testing.T, objs []*object, sel *metav1.LabelSelector) []workload {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return nil
	}
	var out []workload
	for _, w := range workloads(objs) {
		if !w.obj.example() && s.Matches(labels.Set(w.spec.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

// anyContainerPort finds port in one of w's (non-init) containers.
func anyContainerPort(w workload, port intstr.IntOrString) error {
	var errs []string
	for _, c := range w.spec.Spec.Containers {
		if _, err := containerPort(&c, portName(port), port.IntVal); err == nil {
			return nil
		} else {
			errs = append(errs, err.Error())
		}
	}
	return fmt.Errorf("%v: %s", w.obj, strings.Join(errs, "; "))
}

// TestSelectors checks that workloads select their own pods and that
// Services, disruption budgets and network policies select pods that exist
// and name ports those pods have.
func TestSelectors(t *testing.T) {
	objs := loadObjects(t)
	for _, w := range workloads(objs) {
		checkLabels(t, w.obj.String()+" pod labels", w.spec.Labels)
		sel := w.selector
		if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
			t.Errorf("%v: empty selector", w.obj)
			continue
		}
		if got := selected(t, []*object{w.obj}, sel); len(got) != 1 {
			t.Errorf("%v: selector %v does not match its pod template's labels %v", w.obj, sel.MatchLabels, w.spec.Labels)
		}
		for _, other := range selected(t, objs, sel) {
			if other.obj != w.obj {
				t.Errorf("%v: selector %v also matches the pods of %v", w.obj, sel.MatchLabels, other.obj)
			}
		}
	}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Service:
			checkService(t, objs, o, v)
		case *policyv1.PodDisruptionBudget:
			checkPDB(t, objs, o, v)
		case *networkingv1.NetworkPolicy:
			checkNetworkPolicy(t, objs, o, v)
		case *networkingv1.Ingress:
			checkIngress(t, objs, o, v)
		}
	}
}

func checkService(t *testing.T, objs []*object, o *object, s *corev1.Service) {
	t.Helper()
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		if len(dns1123Subdomain(s.Spec.ExternalName)) > 0 || s.Spec.Selector != nil {
			t.Errorf("%v: ExternalName %q: want a DNS name and no selector", o, s.Spec.ExternalName)
		}
		return
	}
	if len(s.Spec.Selector) == 0 {
		t.Errorf("%v: no selector", o)
		return
	}
	ws := selected(t, objs, &metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	if len(ws) == 0 {
		t.Errorf("%v: selector %v selects no pods", o, s.Spec.Selector)
	}
	for _, p := range s.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port)
		}
		for _, w := range ws {
			if err := anyContainerPort(w, target); err != nil {
				t.Errorf("%v port %s: targetPort %s: %v", o, p.Name, target.String(), err)
			}
		}
	}
}

func checkPDB(t *testing.T, objs []*object, o *object, p *policyv1.PodDisruptionBudget) {
	t.Helper()
	ws := selected(t, objs, p.Spec.Selector)
	if len(ws) == 0 {
		t.Errorf("%v: selects no pods", o)
	}
	for _, w := range ws {
		n := w.replicas()
		if n < 0 {
			t.Errorf("%v: selects the per-node pods of %v: drain them with the guide's procedure instead", o, w.obj)
			continue
		}
		if n < 2 {
			t.Errorf("%v: %v has %d replica(s): the budget would block every drain", o, w.obj, n)
		}
		if m := p.Spec.MinAvailable; m != nil && m.Type == intstr.Int && int(m.IntVal) >= n {
			t.Errorf("%v: minAvailable %d of %d replicas: no pod may ever be evicted", o, m.IntVal, n)
		}
	}
}

func checkNetworkPolicy(t *testing.T, objs []*object, o *object, np *networkingv1.NetworkPolicy) {
	t.Helper()
	targets := selected(t, objs, &np.Spec.PodSelector)
	if len(targets) == 0 {
		t.Errorf("%v: podSelector %v selects no pods", o, np.Spec.PodSelector.MatchLabels)
	}
	peers := func(dir string, list []networkingv1.NetworkPolicyPeer) [][]workload {
		var out [][]workload
		for _, peer := range list {
			if peer.PodSelector != nil && peer.NamespaceSelector == nil {
				ws := selected(t, objs, peer.PodSelector)
				if len(ws) == 0 {
					t.Errorf("%v %s: peer podSelector %v selects no pods", o, dir, peer.PodSelector.MatchLabels)
				}
				out = append(out, ws)
			}
		}
		return out
	}
	for _, rule := range np.Spec.Ingress {
		peers("ingress from", rule.From)
		checkPolicyPorts(t, o, "ingress", rule.Ports, targets)
	}
	for _, rule := range np.Spec.Egress {
		for _, ws := range peers("egress to", rule.To) {
			checkPolicyPorts(t, o, "egress", rule.Ports, ws)
		}
	}
}

// checkPolicyPorts checks that each port of a policy rule is a port of the
// pods it is about.
func checkPolicyPorts(t *testing.T, o *object, dir string, ports []networkingv1.NetworkPolicyPort, ws []workload) {
	t.Helper()
	for _, p := range ports {
		if p.Port == nil {
			continue
		}
		for _, w := range ws {
			if err := anyContainerPort(w, *p.Port); err != nil {
				t.Errorf("%v %s port %s: %v", o, dir, p.Port.String(), err)
			}
		}
	}
}

func checkIngress(t *testing.T, objs []*object, o *object, ing *networkingv1.Ingress) {
	t.Helper()
	r := &refs{objs: objs}
	if b, err := os.ReadFile(guide); err == nil {
		r.guide = string(b)
	}
	for _, tls := range ing.Spec.TLS {
		if err := r.secret(tls.SecretName); err != nil {
			t.Errorf("%v tls: %v", o, err)
		}
	}
	for _, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			b := p.Backend.Service
			if b == nil {
				t.Errorf("%v host %s: a backend that is not a Service", o, rule.Host)
				continue
			}
			so := find(objs, "Service", b.Name)
			if so == nil {
				t.Errorf("%v host %s: Service %s does not exist", o, rule.Host, b.Name)
				continue
			}
			if !slices.ContainsFunc(so.obj.(*corev1.Service).Spec.Ports, func(sp corev1.ServicePort) bool {
				return (b.Port.Name != "" && sp.Name == b.Port.Name) || (b.Port.Name == "" && sp.Port == b.Port.Number)
			}) {
				t.Errorf("%v host %s: Service %s has no port %+v", o, rule.Host, b.Name, b.Port)
			}
		}
	}
}
