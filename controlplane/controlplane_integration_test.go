//go:build controlplane

package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
)

// The behaviours the project relies on the API server and the controller
// manager for, shown against the real thing (or the cluster named by
// HUMUS_TEST_KUBECONFIG). One control plane serves all subtests.
func TestControlPlane(t *testing.T) {
	c := controlplanetest.Start(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "humus-controlplane-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	namespace := ns.Name

	t.Run("VersionIsStamped", func(t *testing.T) {
		if os.Getenv(controlplanetest.KubeconfigEnv) != "" {
			t.Skip("an existing cluster runs its own version")
		}
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != controlplane.Version || v.Major != "1" || v.Minor != "37" {
			t.Errorf("/version = %s (major %q minor %q), want %s", v.GitVersion, v.Major, v.Minor, controlplane.Version)
		}
	})

	t.Run("ConnectionFieldsReachTheServer", func(t *testing.T) {
		// What kube.Connection uses: Server, TLS and Token, without client-go.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLS.Clone()}, Timeout: 10 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.Server+"/api/v1/namespaces/"+namespace, nil)
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET namespace with Server, TLS and Token: %s", resp.Status)
		}
		// And the kubeconfig reads back to the same cluster.
		kc, err := controlplane.FromKubeconfig(c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if kc.Server != c.Server || kc.Token != c.Token {
			t.Errorf("FromKubeconfig(%s) = server %s, want %s (and the same token)", c.Kubeconfig, kc.Server, c.Server)
		}
	})

	widgets := schema.GroupVersionResource{Group: "controlplane.humus.z5labs.dev", Version: "v1", Resource: "widgets"}
	// Made by the parent test, so the CRD outlives the subtests that use it.
	createWidgetCRD(t, dyn, widgets)
	// So that the garbage collector watches Widgets now, not at its next
	// 30s discovery sync.
	restart := time.Now()
	if err := c.RestartControllerManager(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted kube-controller-manager in %s", time.Since(restart).Round(time.Millisecond))
	select {
	case <-c.Done():
		t.Fatalf("the restart was reported as a crash: %v", c.Err())
	default:
	}

	t.Run("CRDIsAcceptedAndItsMinimumEnforced", func(t *testing.T) {
		_, err := createWidget(ctx, dyn, widgets, namespace, "too-small", 0)
		if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "should be greater than or equal to 1") {
			t.Fatalf("creating a Widget with spec.size 0: got %v, want Invalid: should be greater than or equal to 1", err)
		}
		if _, err := createWidget(ctx, dyn, widgets, namespace, "big-enough", 1); err != nil {
			t.Fatalf("creating a Widget with spec.size 1: %v", err)
		}
	})

	t.Run("GarbageCollectorDeletesDependentOfDeletedOwner", func(t *testing.T) {
		owner, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertCollected(t, cs, namespace, "dependent-of-configmap", metav1.OwnerReference{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}, func() error {
			return cs.CoreV1().ConfigMaps(namespace).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
	})

	t.Run("GarbageCollectorDeletesDependentOfDeletedCustomResource", func(t *testing.T) {
		owner, err := createWidget(ctx, dyn, widgets, namespace, "owner", 3)
		if err != nil {
			t.Fatal(err)
		}
		assertCollected(t, cs, namespace, "dependent-of-widget", metav1.OwnerReference{
			APIVersion: widgets.GroupVersion().String(), Kind: "Widget", Name: owner.GetName(), UID: owner.GetUID(),
		}, func() error {
			return dyn.Resource(widgets).Namespace(namespace).Delete(ctx, owner.GetName(), metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		})
	})

	t.Run("LeaseIsCreatedAndRead", func(t *testing.T) {
		now := metav1.NewMicroTime(time.Now().Truncate(time.Microsecond))
		_, err := cs.CoordinationV1().Leases(namespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "leader"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To("replica-a"),
				LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := cs.CoordinationV1().Leases(namespace).Get(ctx, "leader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ptr.Deref(got.Spec.HolderIdentity, "") != "replica-a" || ptr.Deref(got.Spec.LeaseDurationSeconds, 0) != 15 ||
			got.Spec.RenewTime == nil || !got.Spec.RenewTime.Equal(&now) {
			t.Errorf("Lease read back as %+v, want holder replica-a, 15s, renewed at %v", got.Spec, now)
		}
	})

	t.Run("ServiceAccountTokenWithoutRBACIsForbidden", func(t *testing.T) {
		if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		token, err := c.ServiceAccountToken(ctx, namespace, "nobody")
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(c.RESTConfig())
		cfg.BearerToken = token
		sa, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sa.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("listing ConfigMaps as a ServiceAccount without RBAC: got %v, want 403 Forbidden", err)
		}
		if want := "system:serviceaccount:" + namespace + ":nobody"; !strings.Contains(err.Error(), want) {
			t.Errorf("403 %q does not name the user %s (so the token did not authenticate as it)", err, want)
		}
	})

	// Last, since it takes the API server and etcd away: a client made
	// before a fault reaches the server again after it.
	t.Run("APIServerRestartAndEtcdPauseAreSurvivedByAClient", func(t *testing.T) {
		if controlplanetest.External() {
			t.Skip("an existing cluster's processes are not this test's")
		}
		get := func(ctx context.Context) error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
			return err
		}
		if err := c.Kill(controlplane.KubeAPIServer); err != nil {
			t.Fatal(err)
		}
		if err := get(ctx); err == nil {
			t.Fatal("the API server answered once killed")
		}
		start := time.Now()
		if err := c.Restart(ctx, controlplane.KubeAPIServer); err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver restarted in %s", time.Since(start).Round(time.Millisecond))
		if err := get(ctx); err != nil {
			t.Fatalf("the client made before the restart: %v", err)
		}

		if err := c.Pause(controlplane.Etcd); err != nil {
			t.Fatal(err)
		}
		// A quorum read needs etcd: it hangs until the request's timeout.
		short, cancel := context.WithTimeout(ctx, time.Second)
		err := get(short)
		cancel()
		if err == nil {
			t.Fatal("a read was answered with etcd paused")
		}
		if err := c.Continue(controlplane.Etcd); err != nil {
			t.Fatal(err)
		}
		if err := get(ctx); err != nil {
			t.Fatalf("a read once etcd continued: %v", err)
		}
		select {
		case <-c.Done():
			t.Fatalf("a fault was reported as a crash: %v", c.Err())
		default:
		}
	})
}

// createWidgetCRD creates the Widget CRD (spec.size: integer, minimum 1),
// waits until it is Established, and deletes it at the end of the test.
func createWidgetCRD(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := t.Context()
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	name := gvr.Resource + "." + gvr.Group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": gvr.Group,
			"scope": "Namespaced",
			"names": map[string]any{"kind": "Widget", "listKind": "WidgetList", "plural": gvr.Resource, "singular": "widget"},
			"versions": []any{map[string]any{
				"name": gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type":       "object",
						"properties": map[string]any{"size": map[string]any{"type": "integer", "minimum": int64(1)}},
					}},
				}},
			}},
		},
	}}
	created, err := crds.Create(ctx, crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the CRD: %v", err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := crds.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: created.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if established(created) {
		return
	}
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && established(u) {
			return
		}
	}
	t.Fatalf("the CRD %s was not Established within 30s", name)
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// createWidget creates a Widget. Right after its CRD is Established the
// API server may still answer 404 for a moment while it installs the
// handler; that is retried for up to 10s.
func createWidget(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string, size int64) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"size": size},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := dyn.Resource(gvr).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return u, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// assertCollected creates a ConfigMap named name owned by owner, calls
// deleteOwner, and waits (watching, up to a minute) for the garbage
// collector to delete the ConfigMap.
func assertCollected(t *testing.T, cs kubernetes.Interface, namespace, name string, owner metav1.OwnerReference, deleteOwner func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dep, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name, OwnerReferences: []metav1.OwnerReference{owner},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: dep.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if err := deleteOwner(); err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Deleted {
			t.Logf("the garbage collector deleted %s %s after its owner, in %s", name, types.UID(dep.UID), time.Since(start).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("%s was not deleted within a minute of its owner %s %s: %v", name, owner.Kind, owner.Name, ctx.Err())
}

// BenchmarkStart measures start-to-ready with the binaries cached: from
// Start until the API server is ready and the controller manager has made
// the default ServiceAccount. Run with -benchtime=3x.
func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	if _, err := controlplane.Build(ctx, controlplane.BuildOptions{Progress: os.Stderr}); err != nil {
		b.Fatal(err)
	}
	var starts, stops time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		c, err := controlplane.Start(ctx, controlplane.Options{Progress: os.Stderr})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
		starts += t1.Sub(t0)
		stops += time.Since(t1)
		n++
	}
	b.ReportMetric(starts.Seconds()/float64(n), "s-to-ready/op")
	b.ReportMetric(stops.Seconds()/float64(n), "s-to-stop/op")
	fmt.Fprintf(os.Stderr, "start-to-ready %.2fs, stop %.2fs (mean of %d)\n", starts.Seconds()/float64(n), stops.Seconds()/float64(n), n)
}

// BenchmarkBuild measures Build into an empty bin directory. It rebuilds all
// three binaries, so it runs only with HUMUS_BENCH_BUILD=1; with the Go build
// cache warm it measures linking, and with GOCACHE set to an empty directory
// a cold build (minutes). Run with -benchtime=1x.
func BenchmarkBuild(b *testing.B) {
	if os.Getenv("HUMUS_BENCH_BUILD") != "1" {
		b.Skip("set HUMUS_BENCH_BUILD=1 to rebuild the binaries")
	}
	for b.Loop() {
		if _, err := controlplane.Build(context.Background(), controlplane.BuildOptions{BinDir: b.TempDir(), Progress: os.Stderr}); err != nil {
			b.Fatal(err)
		}
	}
}
