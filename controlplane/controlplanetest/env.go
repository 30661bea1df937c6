package controlplanetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"

	"github.com/z5labs/humus/controlplane"
)

// Env is a cluster and its admin's clients, with what a whole-App test
// does to the cluster around the App: apply the deploy files, make a
// namespace, install a CRD and wait for it, act as a ServiceAccount, and
// wait for a condition. Every method fails the test at once (t.Fatal) on
// an error.
type Env struct {
	Cluster *controlplane.Cluster
	// Kube and Dynamic are the admin's clients, with no client-side rate
	// limit: tests poll.
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface

	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewEnv returns c's Env, such as NewEnv(t, Start(t)).
func NewEnv(t testing.TB, c *controlplane.Cluster) Env {
	t.Helper()
	rc := c.RESTConfig()
	rc.QPS = -1
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	return Env{Cluster: c, Kube: kc, Dynamic: dc,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))}
}

// Namespace creates a namespace of the test's own, named prefix, a dash
// and a random suffix, and returns its name. It is left when the test
// ends: a cluster started by Start is stopped whole.
func (e Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := e.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("controlplanetest: creating a namespace: %v", err)
	}
	return ns.Name
}

// Apply creates every object of the YAML (or JSON) file path, whose
// documents are separated by "---" lines, as kubectl create -f does, with
// strict field validation; an object that already exists is left as it
// is. Each object's resource is found through the API server's discovery,
// so any kind it serves works, a custom resource's once its CRD is
// established (InstallCRD).
func (e Env) Apply(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("controlplanetest: %s: %v", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := e.create(&obj); err != nil {
			t.Fatalf("controlplanetest: creating %s %s from %s: %v", obj.GetKind(), obj.GetName(), path, err)
		}
	}
}

// create creates obj, unless it exists.
func (e Env) create(obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		e.mapper.Reset() // a CRD installed since discovery was read
		m, err = e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = e.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		ri = e.Dynamic.Resource(m.Resource).Namespace(ns)
	}
	_, err = ri.Create(context.Background(), obj, metav1.CreateOptions{FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// CRDGVR is the resource of CustomResourceDefinitions.
var CRDGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD applies the CRD in the YAML file path, named name, such as
// memcacheds.cache.example.com, and waits up to 30s until the API server
// has established it. On a cluster Start started, it then restarts
// kube-controller-manager, so that its garbage collector watches the new
// resource at once rather than at its next discovery, up to 30s later; on
// an existing cluster (External), it doesn't.
func (e Env) InstallCRD(t testing.TB, path, name string) {
	t.Helper()
	e.Apply(t, path)
	crds := e.Dynamic.Resource(CRDGVR)
	Eventually(t, 30*time.Second, "the CRD "+name+" to be established", func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	e.mapper.Reset()
	if External() {
		return
	}
	if err := e.Cluster.RestartControllerManager(context.Background()); err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
}

// UpgradeCRD replaces the spec of the installed CRD name with the spec of
// the CRD in the YAML file path (its only document), as kubectl replace
// does when an App's new release adds a version or switches the storage
// version, and waits until the API server has it: the CRD Established,
// and each of its new spec's served versions in discovery. The status's
// storedVersions names the new storage version from the update on. The
// API server's handler of the CRD switches to a new storage version a
// moment after the update, which no API shows: an object written before
// that may still be stored at the old one (storage migration rewrites
// it). It fails the test if the file holds no CRD named name, the CRD
// isn't installed, or the API server refuses the new spec (such as one
// that drops a version still in storedVersions).
func (e Env) UpgradeCRD(t testing.TB, path, name string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	var next unstructured.Unstructured
	if err := yaml.Unmarshal(b, &next.Object); err != nil {
		t.Fatalf("controlplanetest: reading the CRD in %s: %v", path, err)
	}
	if next.GetKind() != "CustomResourceDefinition" || next.GetName() != name {
		t.Fatalf("controlplanetest: %s holds %s %s, not the CustomResourceDefinition %s", path, next.GetKind(), next.GetName(), name)
	}
	spec, ok := next.Object["spec"].(map[string]any)
	if !ok {
		t.Fatalf("controlplanetest: the CRD in %s has no spec", path)
	}
	crds := e.Dynamic.Resource(CRDGVR)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := crds.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		crd.Object["spec"] = spec
		_, err = crds.Update(context.Background(), crd, metav1.UpdateOptions{FieldValidation: "Strict"})
		return err
	})
	if err != nil {
		t.Fatalf("controlplanetest: upgrading the CRD %s to %s: %v", name, path, err)
	}
	group, _, _ := unstructured.NestedString(spec, "group")
	plural, _, _ := unstructured.NestedString(spec, "names", "plural")
	versions, _, _ := unstructured.NestedSlice(spec, "versions")
	Eventually(t, 30*time.Second, "the CRD "+name+" to be upgraded", func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		established := false
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" {
				established = c["status"] == "True"
			}
		}
		if !established {
			return false, nil
		}
		for _, v := range versions {
			v, _ := v.(map[string]any)
			if served, _ := v["served"].(bool); !served {
				continue
			}
			version, _ := v["name"].(string)
			list, err := e.Kube.Discovery().ServerResourcesForGroupVersion(group + "/" + version)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			found := false
			for _, r := range list.APIResources {
				found = found || r.Name == plural
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
	e.mapper.Reset()
}

// CAPEM returns the PEM of the cluster's CA, skipping the test when the
// cluster's kubeconfig names none.
func (e Env) CAPEM(t testing.TB) []byte {
	t.Helper()
	if len(e.Cluster.CA) == 0 {
		t.Skip("the cluster's kubeconfig names no CA")
	}
	return e.Cluster.CA
}

// WithToken returns a clientset of the cluster that authenticates with
// the bearer token token, with no client-side rate limit.
func (e Env) WithToken(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	kc, err := kubernetes.NewForConfig(&rest.Config{
		Host:            "https://" + e.Cluster.Server,
		BearerToken:     token,
		QPS:             -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.CAPEM(t)},
	})
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	return kc
}

// AsServiceAccount returns a clientset of the cluster that authenticates
// as the ServiceAccount sa in namespace, with a token the TokenRequest API
// minted for it (Cluster.ServiceAccountToken): what a pod of sa may do is
// what the RBAC bound to sa allows, such as the deploy files'. Pair it
// with WaitAllowed after creating the bindings.
func (e Env) AsServiceAccount(t testing.TB, namespace, sa string) kubernetes.Interface {
	t.Helper()
	token, err := e.Cluster.ServiceAccountToken(context.Background(), namespace, sa)
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	return e.WithToken(t, token)
}

// WaitAllowed waits up to 10s until each request allow makes with the
// clientset kc is allowed: it returns nil, or an error that isn't a
// Forbidden. The API server's authorizer sees RBAC objects through a
// cache of its own, so a binding just created may not have taken effect.
func WaitAllowed(t testing.TB, kc kubernetes.Interface, allow ...func(ctx context.Context, kc kubernetes.Interface) error) {
	t.Helper()
	Eventually(t, 10*time.Second, "the RBAC rules to take effect", func(ctx context.Context) (bool, error) {
		for _, f := range allow {
			if err := f(ctx, kc); apierrors.IsForbidden(err) {
				return false, nil
			}
		}
		return true, nil
	})
}

// Eventually polls cond every 20ms, at once first, until it returns true,
// and fails the test naming what when it hasn't within timeout, or when it
// returns an error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("controlplanetest: waiting %v for %s: %v", timeout, what, err)
	}
}

// FreeAddr returns an address on 127.0.0.1 whose port was free a moment
// ago, for an App's probes or metrics to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Ready waits up to 30s until http://addr/readyz answers 200, as a
// kubelet's readiness probe would see an App's probes.
func Ready(t testing.TB, addr string) {
	t.Helper()
	Eventually(t, 30*time.Second, "/readyz on "+addr+" to answer 200", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// IgnoreNotFound returns err, or nil when it is a NotFound.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Holder returns the holder of the Lease name in ns, or "" when it has
// none or doesn't exist.
func (e Env) Holder(ctx context.Context, ns, name string) (string, error) {
	l, err := e.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "", IgnoreNotFound(err)
	}
	return *l.Spec.HolderIdentity, nil
}

// RequireNoHolder checks that the Lease name in ns exists and has no
// holder, as a released Lease has.
func (e Env) RequireNoHolder(t testing.TB, ns, name string) {
	t.Helper()
	l, err := e.Kube.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("controlplanetest: %v", err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("controlplanetest: the Lease %s/%s is held by %s", ns, name, *h)
	}
}

// WaitHolder waits up to timeout until identity holds the Lease name in
// ns.
func (e Env) WaitHolder(t testing.TB, timeout time.Duration, ns, name, identity string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%s to hold the Lease %s/%s", identity, ns, name), func(ctx context.Context) (bool, error) {
		h, err := e.Holder(ctx, ns, name)
		return h == identity, err
	})
}
