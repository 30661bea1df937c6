//go:build controlplane

package kube_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
)

// A Bundle applies a ConfigMap of each name its spec lists; its Owns of
// ConfigMaps prunes the rest. Fail makes its reconcile fail after the
// applies.
type bundleSpec struct {
	Names []string `json:"names,omitempty"`
	Fail  bool     `json:"fail,omitempty"`
}

type bundleStatus struct{}

type bundle = kube.Object[bundleSpec, bundleStatus]

var bundles = kube.Resource[bundleSpec, bundleStatus]{
	Group:   "prune.humus.example.com",
	Version: "v1",
	Kind:    "Bundle",
	Plural:  "bundles",
	Scope:   kube.Namespaced,
	Labels:  map[string]string{kube.ApplySetParentTypeLabel: "true"},
}

// bundleRules are the RBAC rules "Pruning" in the docs lists for the
// Bundle controller: its resource (patch for the ApplySet's label and
// annotations), its status, the Lease and Events, and on its ConfigMaps
// what Owns needs, what the Reconciler's applies need, and delete, which
// pruning needs.
var bundleRules = []rbacv1.PolicyRule{
	{APIGroups: []string{bundles.Group}, Resources: []string{"bundles"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{bundles.Group}, Resources: []string{"bundles/status"}, Verbs: []string{"patch"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// TestPruningAgainstTheAPIServer shows, on a real API server, with a
// ServiceAccount token bound to exactly the rules the docs list: a child
// a Bundle no longer applies is deleted after the next reconcile that
// succeeds, and not after one that fails; another Bundle's child and a
// hand-made ConfigMap labelled part of the same ApplySet survive; and
// kubectl get with the ApplySet's label lists the set, whose parent
// carries kubectl's id label and annotations.
func TestPruningAgainstTheAPIServer(t *testing.T) {
	cluster, dyn, kc := startWithCRD(t, bundles)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	const ns = "prune"
	_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bundle-controller"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bundle-controller"}, Rules: bundleRules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bundle-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bundle-controller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bundle-controller", Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	token, err := cluster.ServiceAccountToken(ctx, ns, "bundle-controller")
	require.NoError(t, err)
	env := controlplanetest.NewEnv(t, cluster)
	controlplanetest.WaitAllowed(t, env.WithToken(t, token), func(ctx context.Context, kc kubernetes.Interface) error {
		return kc.CoreV1().ConfigMaps(ns).Delete(ctx, "none", metav1.DeleteOptions{})
	})

	tel := humustest.NewTelemetry(t)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: tel.Telemetry}
	client, err := kube.NewClient(s, kube.Connection{
		Server: cluster.Server,
		TLS:    cluster.TLS,
		Token:  func(context.Context) (string, error) { return token, nil },
	})
	require.NoError(t, err)
	apps, err := kubernetes.NewForConfig(client.Config())
	require.NoError(t, err)
	settings := kube.DefaultSettings()
	settings.Name = "bundle-controller"
	settings.Namespace = ns
	settings.LeaderElection.Namespace = ns
	settings.LeaderElection.Identity = "replica-1"
	failed := make(chan string, 100)
	configMaps := corev1.SchemeGroupVersion.WithResource("configmaps")
	ctrl, err := kube.NewController(s, client, settings, bundles,
		kube.ReconcilerFunc[bundleSpec, bundleStatus](func(ctx context.Context, b bundle) (kube.Result[bundleStatus], error) {
			for _, name := range b.Spec.Names {
				cm := corev1ac.ConfigMap(b.Name+"-"+name, b.Namespace).
					WithLabels(kube.ApplySetLabels(ctx)).
					WithOwnerReferences(bundles.ControllerReference(b)).
					WithData(map[string]string{"name": name})
				if _, err := apps.CoreV1().ConfigMaps(b.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "bundle-controller", Force: true}); err != nil {
					return kube.Result[bundleStatus]{}, err
				}
			}
			if b.Spec.Fail {
				failed <- b.Name
				return kube.Result[bundleStatus]{}, errors.New("the bundle asked to fail")
			}
			return kube.Result[bundleStatus]{}, nil
		}),
		kube.Owns(configMaps, kube.Prune()),
	)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- ctrl.Serve(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, ctrl.Shutdown(context.Background()))
		require.NoError(t, <-served)
	})

	bundleObjects := dyn.Resource(bundles.GVR()).Namespace(ns)
	setSpec := func(name string, spec map[string]any) {
		t.Helper()
		b, err := bundleObjects.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = bundleObjects.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": bundles.Group + "/v1", "kind": "Bundle",
				"metadata": map[string]any{"name": name}, "spec": spec,
			}}, metav1.CreateOptions{})
			require.NoError(t, err)
			return
		}
		require.NoError(t, err)
		b.Object["spec"] = spec
		_, err = bundleObjects.Update(ctx, b, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	configMapNames := func(ctx context.Context) ([]string, error) {
		l, err := kc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, cm := range l.Items {
			if cm.Name != "kube-root-ca.crt" {
				names = append(names, cm.Name)
			}
		}
		slices.Sort(names)
		return names, nil
	}
	waitConfigMaps := func(what string, want ...string) {
		t.Helper()
		controlplanetest.Eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
			got, err := configMapNames(ctx)
			return slices.Equal(got, want), err
		})
	}

	setSpec("b1", map[string]any{"names": []any{"a", "b", "c"}})
	setSpec("b2", map[string]any{"names": []any{"x"}})
	waitConfigMaps("the Bundles' ConfigMaps", "b1-a", "b1-b", "b1-c", "b2-x")
	id := kube.ApplySetID("b1", ns, "Bundle", bundles.Group)

	// A ConfigMap made by hand, labelled part of b1's set but owned by no
	// one, and one controlled by b2, labelled part of b1's set, that b2's
	// reconcile doesn't apply.
	_, err = kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "by-hand", Labels: map[string]string{kube.ApplySetPartOfLabel: id}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	controller := true
	b2, err := bundleObjects.Get(ctx, "b2", metav1.GetOptions{})
	require.NoError(t, err)
	_, err = kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "of-b2", Labels: map[string]string{kube.ApplySetPartOfLabel: id},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: bundles.Group + "/v1", Kind: "Bundle", Name: "b2", UID: b2.GetUID(), Controller: &controller}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("TheParentIsAnApplySetKubectlSees", func(t *testing.T) {
		controlplanetest.Eventually(t, 30*time.Second, "b1's ApplySet label and annotations", func(ctx context.Context) (bool, error) {
			b, err := bundleObjects.Get(ctx, "b1", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return b.GetLabels()[kube.ApplySetIDLabel] == id &&
				b.GetAnnotations()["applyset.kubernetes.io/tooling"] == "humus-kube/v1" &&
				b.GetAnnotations()["applyset.kubernetes.io/contains-group-kinds"] == "ConfigMap", nil
		})
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Skip("no kubectl on the PATH")
		}
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cluster.Kubeconfig, "get", "configmaps", "-n", ns,
			"-l", kube.ApplySetPartOfLabel+"="+id, "-o", "name").CombinedOutput()
		require.NoError(t, err, string(out))
		got := strings.Fields(string(out))
		slices.Sort(got)
		require.Equal(t, []string{"configmap/b1-a", "configmap/b1-b", "configmap/b1-c", "configmap/by-hand", "configmap/of-b2"}, got,
			"kubectl lists the set by its label, with what others labelled so, and not b2's own child")
	})

	t.Run("AChildNoLongerAppliedIsDeleted", func(t *testing.T) {
		setSpec("b1", map[string]any{"names": []any{"a", "b"}})
		waitConfigMaps("b1-c to be pruned", "b1-a", "b1-b", "b2-x", "by-hand", "of-b2")
		// The preview came first, naming what went. The deletion's record
		// is written once the Delete's answer is read, which can be after
		// the list above no longer shows b1-c: wait for it.
		var preview, pruned int
		controlplanetest.Eventually(t, 10*time.Second, "the record of b1-c's deletion", func(context.Context) (bool, error) {
			preview, pruned = 0, 0
			for i, r := range tel.Records() {
				var children string
				r.WalkAttributes(func(kv attribute.KeyValue) bool {
					if kv.Key == "children" || kv.Key == "child" {
						children = kv.Value.Emit()
					}
					return true
				})
				switch body := r.Body().Emit(); {
				case body == "prune preview" && strings.Contains(children, ns+"/b1-c"):
					preview = i + 1
				case body == "pruned" && children == ns+"/b1-c":
					pruned = i + 1
				}
			}
			return pruned != 0, nil
		})
		require.NotZero(t, preview, "a prune preview record names b1-c")
		require.Greater(t, pruned, preview, "the preview comes before the deletion's record")
	})

	t.Run("NothingIsDeletedAfterAFailedReconcile", func(t *testing.T) {
		setSpec("b1", map[string]any{"names": []any{"a"}, "fail": true})
		for range 2 { // the first reconcile and its retry
			select {
			case <-failed:
			case <-ctx.Done():
				t.Fatal("no failed reconcile of b1")
			}
		}
		got, err := configMapNames(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"b1-a", "b1-b", "b2-x", "by-hand", "of-b2"}, got, "a failed reconcile prunes nothing")

		setSpec("b1", map[string]any{"names": []any{"a"}})
		waitConfigMaps("b1-b to be pruned once b1 reconciles", "b1-a", "b2-x", "by-hand", "of-b2")
	})

	// kubectl's own ApplySet, of a ConfigMap parent, carries the id
	// ApplySetID computes for it.
	t.Run("TheIDIsKubectls", func(t *testing.T) {
		kubectl, err := exec.LookPath("kubectl")
		if err != nil {
			t.Skip("no kubectl on the PATH")
		}
		cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", cluster.Kubeconfig, "apply", "-n", ns, "--server-side",
			"--prune", "--applyset=configmaps/kubectl-set", "-f", "-")
		cmd.Env = append(os.Environ(), "KUBECTL_APPLYSET=true")
		cmd.Stdin = strings.NewReader("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: by-kubectl\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		parent, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "kubectl-set", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, kube.ApplySetID("kubectl-set", ns, "ConfigMap", ""), parent.Labels[kube.ApplySetIDLabel])
		require.NoError(t, kc.CoreV1().ConfigMaps(ns).Delete(ctx, "kubectl-set", metav1.DeleteOptions{}))
		require.NoError(t, kc.CoreV1().ConfigMaps(ns).Delete(ctx, "by-kubectl", metav1.DeleteOptions{}))
	})

	t.Run("AnEmptySetPrunesEveryChild", func(t *testing.T) {
		setSpec("b1", map[string]any{})
		waitConfigMaps("b1-a to be pruned", "b2-x", "by-hand", "of-b2")
	})
}

// prunedGadgets are Gadgets whose CRD makes them ApplySet parents, as an
// Owns that prunes needs.
func prunedGadgets() kube.Resource[gadgetSpec, gadgetStatus] {
	r := gadgets
	r.Labels = map[string]string{kube.ApplySetParentTypeLabel: "true"}
	return r
}

// TestAPrunedOwnsReconcilesOncePerChangeAgainstTheAPIServer counts
// reconciles with an Owns that prunes: the controller's apply of the
// ApplySet parent's label and annotations, on an object's first
// reconcile, is its own write, so a new object is reconciled once, and a
// spec change once, as without Prune
// (TestOwnWritesDontComeBackAsWorkAgainstTheAPIServer).
func TestAPrunedOwnsReconcilesOncePerChangeAgainstTheAPIServer(t *testing.T) {
	h := startGadgetCounterOf(t, prunedGadgets(), "sentinel", func(ctx context.Context, _ *gadgetCounter, rkc kubernetes.Interface, g gadget, _ bool) error {
		return applyConfigMap(ctx, rkc, g, g.Name, kube.ApplySetLabels(ctx))
	}, kube.Owns(corev1.SchemeGroupVersion.WithResource("configmaps"), kube.Prune()))

	h.create("g1", 3)
	h.seen("g1", 3)
	h.settled()
	g1, err := h.res.Get(h.ctx, "g1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, kube.ApplySetID("g1", "default", "Gadget", gadgets.Group), g1.GetLabels()[kube.ApplySetIDLabel], "the ApplySet's label was applied")
	require.Equal(t, 1, h.count("g1"), "a new object is reconciled once: the ApplySet parent's apply doesn't bring it back")

	h.setSize("g1", 2)
	h.seen("g1", 2)
	h.settled()
	require.Equal(t, 2, h.count("g1"), "a spec change is reconciled once")
	_, err = h.kc.CoreV1().ConfigMaps("default").Get(h.ctx, "g1", metav1.GetOptions{})
	require.NoError(t, err, "the child each reconcile applies stays")
}

// TestAChildWrittenThroughItsScaleIsKeptAgainstTheAPIServer: a Reconciler
// that creates its Deployment once and then sets its replicas only
// through the scale subresource has written it, so a later reconcile,
// which prunes, keeps it.
func TestAChildWrittenThroughItsScaleIsKeptAgainstTheAPIServer(t *testing.T) {
	h := startGadgetCounterOf(t, prunedGadgets(), "sentinel", func(ctx context.Context, _ *gadgetCounter, rkc kubernetes.Interface, g gadget, first bool) error {
		// The ConfigMap, not pruned, is what settled pokes.
		if err := applyConfigMap(ctx, rkc, g, g.Name, nil); err != nil {
			return err
		}
		if first {
			labels := map[string]string{"gadget": g.Name}
			d := appsv1ac.Deployment(g.Name, g.Namespace).
				WithLabels(kube.ApplySetLabels(ctx)).
				WithOwnerReferences(metav1ac.OwnerReference().
					WithAPIVersion(g.APIVersion).WithKind(g.Kind).WithName(g.Name).WithUID(g.UID).WithController(true)).
				WithSpec(appsv1ac.DeploymentSpec().
					WithReplicas(1).
					WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
					WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).
						WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("c").WithImage("registry.k8s.io/pause:3.10")))))
			_, err := rkc.AppsV1().Deployments(g.Namespace).Apply(ctx, d, metav1.ApplyOptions{FieldManager: "gadget-controller", Force: true})
			return err
		}
		// Later reconciles write the Deployment only through /scale.
		scale, err := rkc.AppsV1().Deployments(g.Namespace).GetScale(ctx, g.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		scale.Spec.Replicas = g.Spec.Size
		_, err = rkc.AppsV1().Deployments(g.Namespace).UpdateScale(ctx, g.Name, scale, metav1.UpdateOptions{FieldManager: "gadget-controller"})
		return err
	}, kube.Owns(corev1.SchemeGroupVersion.WithResource("configmaps")),
		kube.Owns(appsv1.SchemeGroupVersion.WithResource("deployments"), kube.Prune()))

	h.create("g1", 1)
	h.seen("g1", 1)
	h.setSize("g1", 2)
	h.seen("g1", 2)
	h.settled()
	d, err := h.kc.AppsV1().Deployments("default").Get(h.ctx, "g1", metav1.GetOptions{})
	require.NoError(t, err, "the Deployment the reconciles scaled is kept")
	require.Nil(t, d.DeletionTimestamp, "the Deployment the reconciles scaled is kept")
	require.Equal(t, int32(2), *d.Spec.Replicas, "the later reconcile's scale")
}
