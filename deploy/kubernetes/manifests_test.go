// Package kubernetes_test validates SPACE's Kubernetes manifests without a
// cluster: every YAML document is decoded strictly into its Kubernetes API
// type (unknown kinds, unknown or mis-cased fields and duplicate keys fail, as
// they would on the API server), then checked for the mistakes a schema does
// not catch: flags the `space` binary does not have, references to Secrets,
// ConfigMaps, volumes and ports that do not exist, selectors that select
// nothing, floating image tags, and containers with more privilege than the
// manifest says they need.
package kubernetes_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// namespace is where every namespaced object of the manifests lives.
const namespace = "space"

// kinds maps each apiVersion and kind the manifests may use to a constructor
// of its typed object. A kind not listed here is an error: add it (and the
// checks it needs) rather than let an unchecked object through.
var kinds = map[schema.GroupVersionKind]func() runtime.Object{
	corev1.SchemeGroupVersion.WithKind("Namespace"):             func() runtime.Object { return &corev1.Namespace{} },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):             func() runtime.Object { return &corev1.ConfigMap{} },
	corev1.SchemeGroupVersion.WithKind("Secret"):                func() runtime.Object { return &corev1.Secret{} },
	corev1.SchemeGroupVersion.WithKind("Service"):               func() runtime.Object { return &corev1.Service{} },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):        func() runtime.Object { return &corev1.ServiceAccount{} },
	corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"): func() runtime.Object { return &corev1.PersistentVolumeClaim{} },
	appsv1.SchemeGroupVersion.WithKind("Deployment"):            func() runtime.Object { return &appsv1.Deployment{} },
	appsv1.SchemeGroupVersion.WithKind("DaemonSet"):             func() runtime.Object { return &appsv1.DaemonSet{} },
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"): func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"):   func() runtime.Object { return &networkingv1.NetworkPolicy{} },
	networkingv1.SchemeGroupVersion.WithKind("Ingress"):         func() runtime.Object { return &networkingv1.Ingress{} },
	rbacv1.SchemeGroupVersion.WithKind("Role"):                  func() runtime.Object { return &rbacv1.Role{} },
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"):           func() runtime.Object { return &rbacv1.RoleBinding{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"):           func() runtime.Object { return &rbacv1.ClusterRole{} },
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"):    func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
}

// clusterScoped are the kinds that have no namespace.
var clusterScoped = map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true}

// kustomizationFile is not a Kubernetes object: it is decoded into
// kustomization, strictly too.
const kustomizationFile = "kustomization.yaml"

// object is one decoded YAML document.
type object struct {
	file  string // base name of its file
	index int    // position of the document in the file, from 0
	gvk   schema.GroupVersionKind
	obj   runtime.Object
	meta  metav1.Object
}

func (o *object) String() string {
	return fmt.Sprintf("%s#%d %s %s", o.file, o.index, o.gvk.Kind, o.meta.GetName())
}

// example reports whether the object comes from a template that is not
// applied as is (*.example.yaml): its objects exist only once the user has
// made them.
func (o *object) example() bool { return strings.HasSuffix(o.file, ".example.yaml") }

// splitDocuments splits a multi-document YAML stream at its "---" lines and
// drops the documents that hold only comments and blank lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for line := range bytes.Lines(data) {
		trimmed := bytes.TrimRight(line, " \t\r\n")
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(trimmed, []byte("--- ")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

func hasContent(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' {
			return true
		}
	}
	return false
}

// decodeStrict converts one YAML document to JSON (refusing duplicate keys)
// and decodes it into v the way the API server does: field names are
// case-sensitive, and unknown or duplicate fields are errors.
func decodeStrict(doc []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	strictErrs, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return fmt.Errorf("strict decoding: %s", strings.Join(msgs, "; "))
	}
	return nil
}

// decodeDocument decodes one Kubernetes object into the API type its
// apiVersion and kind name.
func decodeDocument(doc []byte) (schema.GroupVersionKind, runtime.Object, error) {
	var tm metav1.TypeMeta
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("yaml: %w", err)
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("apiVersion/kind: %w", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return schema.GroupVersionKind{}, nil, fmt.Errorf("apiVersion %q, kind %q: want both", tm.APIVersion, tm.Kind)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	newObj, ok := kinds[gvk]
	if !ok {
		return gvk, nil, fmt.Errorf("apiVersion %s kind %s: not a kind these manifests may use (add it to kinds with the checks it needs)", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := decodeStrict(doc, obj); err != nil {
		return gvk, nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return gvk, obj, nil
}

// manifestFiles lists the YAML files of this directory, sorted.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if yml, _ := filepath.Glob("*.yml"); len(yml) > 0 {
		t.Fatalf("%v: name YAML files *.yaml, the only pattern the tests and kustomization.yaml cover", yml)
	}
	sort.Strings(files)
	return files
}

var loaded struct {
	once sync.Once
	objs []*object
	errs []string
}

// loadObjects decodes every Kubernetes object of the manifests once per test
// binary; it fails t if any document does not decode.
func loadObjects(t *testing.T) []*object {
	t.Helper()
	loaded.once.Do(func() {
		files, err := filepath.Glob("*.yaml")
		if err != nil {
			loaded.errs = append(loaded.errs, err.Error())
			return
		}
		sort.Strings(files)
		for _, f := range files {
			if f == kustomizationFile {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				loaded.errs = append(loaded.errs, err.Error())
				continue
			}
			docs := splitDocuments(data)
			if len(docs) == 0 {
				loaded.errs = append(loaded.errs, f+": no YAML document")
			}
			for i, doc := range docs {
				gvk, obj, err := decodeDocument(doc)
				if err != nil {
					loaded.errs = append(loaded.errs, fmt.Sprintf("%s, document %d: %v", f, i, err))
					continue
				}
				meta, err := metaOf(obj)
				if err != nil {
					loaded.errs = append(loaded.errs, fmt.Sprintf("%s, document %d: %v", f, i, err))
					continue
				}
				loaded.objs = append(loaded.objs, &object{file: f, index: i, gvk: gvk, obj: obj, meta: meta})
			}
		}
	})
	if len(loaded.errs) > 0 {
		t.Fatalf("manifests do not decode:\n%s", strings.Join(loaded.errs, "\n"))
	}
	return loaded.objs
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// find returns the object of kind and name, or nil.
func find(objs []*object, kind, name string) *object {
	for _, o := range objs {
		if o.gvk.Kind == kind && o.meta.GetName() == name {
			return o
		}
	}
	return nil
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := loadObjects(t)
	if len(objs) == 0 {
		t.Fatal("no manifests found")
	}
	seen := map[string]*object{}
	counts := map[string]int{}
	for _, o := range objs {
		counts[o.gvk.Kind]++
		key := o.gvk.Kind + "/" + o.meta.GetNamespace() + "/" + o.meta.GetName()
		if prev := seen[key]; prev != nil {
			t.Errorf("%v: same kind, namespace and name as %v", o, prev)
		}
		seen[key] = o
		checkMetadata(t, o)
	}
	// What a deployment of SPACE cannot do without.
	for _, kind := range []string{"Namespace", "ConfigMap", "Deployment", "DaemonSet", "Service", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount"} {
		if counts[kind] == 0 {
			t.Errorf("no %s in the manifests", kind)
		}
	}
	t.Logf("decoded %d objects: %v", len(objs), counts)
}

// checkMetadata checks an object's name, namespace and labels as the API
// server would validate them.
func checkMetadata(t *testing.T, o *object) {
	t.Helper()
	name := o.meta.GetName()
	nameErrs := dns1123Subdomain(name)
	if o.gvk.Kind == "Service" {
		nameErrs = dns1035Label(name)
	}
	if name == "" || len(nameErrs) > 0 {
		t.Errorf("%v: name %q: %v", o, name, nameErrs)
	}
	switch ns := o.meta.GetNamespace(); {
	case clusterScoped[o.gvk.Kind] && ns != "":
		t.Errorf("%v: cluster-scoped, but has namespace %q", o, ns)
	case !clusterScoped[o.gvk.Kind] && ns != namespace:
		t.Errorf("%v: namespace %q, want %q", o, ns, namespace)
	}
	checkLabels(t, o.String()+" labels", o.meta.GetLabels())
	if o.meta.GetLabels()["app.kubernetes.io/name"] != "space" {
		t.Errorf("%v: no label app.kubernetes.io/name=space (kubectl get all -l app.kubernetes.io/name=space finds it by that)", o)
	}
}

func checkLabels(t *testing.T, what string, labels map[string]string) {
	t.Helper()
	for k, v := range labels {
		if errs := labelKey(k); len(errs) > 0 {
			t.Errorf("%s: key %q: %v", what, k, errs)
		}
		if errs := labelValue(v); len(errs) > 0 {
			t.Errorf("%s: %s=%q: %v", what, k, v, errs)
		}
	}
}

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoding is strict, so a field added to kustomization.yaml must be
// added here (and checked).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(t *testing.T) *kustomization {
	t.Helper()
	data, err := os.ReadFile(kustomizationFile)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := decodeStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	return &k
}

// TestKustomization checks that kubectl apply -k applies every manifest but
// the templates, into the manifests' namespace, and that its image override
// names the image the containers use.
func TestKustomization(t *testing.T) {
	k := readKustomization(t)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", kustomizationFile, k.APIVersion, k.Kind)
	}
	if k.Namespace != namespace {
		t.Errorf("%s: namespace %q, want %q", kustomizationFile, k.Namespace, namespace)
	}
	var want []string
	for _, f := range manifestFiles(t) {
		if f != kustomizationFile && !strings.HasSuffix(f, ".example.yaml") {
			want = append(want, f)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("%s resources = %v, want every manifest but the *.example.yaml templates: %v", kustomizationFile, got, want)
	}
	images := map[string]bool{}
	for _, o := range loadObjects(t) {
		for _, c := range allContainers(o) {
			name, _, _ := splitImage(c.Image)
			images[name] = true
		}
	}
	for _, img := range k.Images {
		if !images[img.Name] {
			t.Errorf("%s: image override %q matches no container image %v", kustomizationFile, img.Name, slices.Sorted(maps.Keys(images)))
		}
		if img.NewTag == "" || img.NewTag == "latest" {
			t.Errorf("%s: image %q: newTag %q, want a fixed tag", kustomizationFile, img.Name, img.NewTag)
		}
	}
}

// TestStrictDecoderRejects shows that decodeDocument refuses what the API
// server refuses, so that the other tests' success means something.
func TestStrictDecoderRejects(t *testing.T) {
	const valid = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
spec:
  replicas: 2
  selector:
    matchLabels: {app: d}
  template:
    metadata:
      labels: {app: d}
    spec:
      containers:
        - name: c
          image: example/c:1
`
	if _, obj, err := decodeDocument([]byte(valid)); err != nil {
		t.Fatalf("valid Deployment: %v", err)
	} else if r := obj.(*appsv1.Deployment).Spec.Replicas; r == nil || *r != 2 {
		t.Fatalf("valid Deployment: replicas = %v, want 2", r)
	}
	for name, tc := range map[string]struct{ old, new string }{
		"unknown field":        {"  replicas: 2\n", "  replicas: 2\n  replica: 3\n"},
		"unknown nested field": {"          image: example/c:1\n", "          image: example/c:1\n          imagePullPolicy: Always\n          readinessprobe: {}\n"},
		"wrong case":           {"  replicas: 2\n", "  Replicas: 2\n"},
		"duplicate key":        {"  replicas: 2\n", "  replicas: 2\n  replicas: 3\n"},
		"wrong type":           {"  replicas: 2\n", "  replicas: two\n"},
		"unknown kind":         {"kind: Deployment", "kind: Deploymnet"},
		"unknown apiVersion":   {"apiVersion: apps/v1", "apiVersion: apps/v1beta1"},
		"no kind":              {"kind: Deployment\n", "\n"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.Replace(valid, tc.old, tc.new, 1)
			if doc == valid {
				t.Fatalf("test case does not change the document (%q not found)", tc.old)
			}
			if _, _, err := decodeDocument([]byte(doc)); err == nil {
				t.Errorf("decoded without error:\n%s", doc)
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"# only a comment\n", 0},
		{"a: 1\n", 1},
		{"---\na: 1\n---\n# comment\n---\nb: 2\n", 2},
		{"a: |\n  ---\n  text\n--- \nb: 2\n", 2}, // an indented "---" is content
		{"a: 1\r\n---\r\nb: 2\r\n", 2},
	} {
		if got := splitDocuments([]byte(tc.in)); len(got) != tc.want {
			t.Errorf("splitDocuments(%q) = %d documents %q, want %d", tc.in, len(got), got, tc.want)
		}
	}
}
