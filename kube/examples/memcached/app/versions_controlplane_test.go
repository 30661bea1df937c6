//go:build controlplane

package app_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// TestMemcachedVersions runs the Memcached App with its conversion webhook
// served over TLS from the App itself, and the CRD's clientConfig naming
// it (a URL, as for a local run, with the CA of the App's certificate), so
// that the real API server converts between v1alpha1 and v1beta1 through
// the App for every request at a version other than the stored one.
func TestMemcachedVersions(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	ns := e.Namespace(t, "versions")
	_, tel, a := startServingWebhooks(t, e, ns)

	at := func(version string) dynamic.ResourceInterface {
		return e.Dynamic.Resource(schema.GroupVersionResource{Group: app.Memcached.Group, Version: version, Resource: app.Memcached.Plural}).Namespace(ns)
	}
	alpha, beta := at("v1alpha1"), at("v1beta1")
	memcached := func(version, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": app.Memcached.Group + "/" + version, "kind": "Memcached",
			"metadata": map[string]any{"name": name}, "spec": spec,
		}}
	}
	create := func(ri dynamic.ResourceInterface, m *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		got, err := ri.Create(t.Context(), m, metav1.CreateOptions{FieldManager: "test", FieldValidation: "Strict"})
		require.NoError(t, err)
		return got
	}
	get := func(ri dynamic.ResourceInterface, name string) *unstructured.Unstructured {
		t.Helper()
		got, err := ri.Get(t.Context(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return got
	}
	limits := map[string]any{"limits": map[string]any{"memory": "64Mi"}}

	t.Run("CreatedAtTheOldVersionReadAtTheNewAndBack", func(t *testing.T) {
		created := create(alpha, memcached("v1alpha1", "old", map[string]any{"size": int64(1)}))
		require.Equal(t, "cache.example.com/v1alpha1", created.GetAPIVersion())
		atBeta := get(beta, "old")
		require.Equal(t, "cache.example.com/v1beta1", atBeta.GetAPIVersion())
		require.Equal(t, created.GetUID(), atBeta.GetUID())
		require.Equal(t, int64(1), nested(t, atBeta, "spec", "size"))
		require.Equal(t, "memcached:1.6.26-alpine3.19", nested(t, atBeta, "spec", "image"), "v1alpha1's default")
		require.Equal(t, int64(1), nested(t, get(alpha, "old"), "spec", "size"))
	})

	t.Run("CreatedAtTheNewVersionReadAtTheOld", func(t *testing.T) {
		create(beta, memcached("v1beta1", "new", map[string]any{"size": int64(2), "resources": limits}))
		atAlpha := get(alpha, "new")
		require.Equal(t, "cache.example.com/v1alpha1", atAlpha.GetAPIVersion())
		require.Equal(t, int64(2), nested(t, atAlpha, "spec", "size"))
		_, has, _ := unstructured.NestedFieldNoCopy(atAlpha.Object, "spec", "resources")
		require.False(t, has, "v1alpha1 has no resources")
		require.Contains(t, atAlpha.GetAnnotations(), conversion.PreservedAnnotation, "but keeps them")
		require.NotContains(t, get(beta, "new").GetAnnotations(), conversion.PreservedAnnotation, "which v1beta1 doesn't show")
	})

	t.Run("AListAtEachVersion", func(t *testing.T) {
		for _, v := range []string{"v1alpha1", "v1beta1"} {
			list, err := at(v).List(t.Context(), metav1.ListOptions{})
			require.NoError(t, err)
			sizes := map[string]int64{}
			for _, m := range list.Items {
				require.Equal(t, "cache.example.com/"+v, m.GetAPIVersion())
				sizes[m.GetName()] = nested(t, &m, "spec", "size").(int64)
			}
			require.Equal(t, map[string]int64{"old": 1, "new": 2}, sizes, v)
		}
	})

	t.Run("TheControllerReconcilesObjectsCreatedAtEitherVersion", func(t *testing.T) {
		require.Equal(t, int32(1), *waitDeployment(t, e.Kube, ns, "old").Spec.Replicas)
		d := waitDeployment(t, e.Kube, ns, "new")
		require.Equal(t, int32(2), *d.Spec.Replicas)
		require.Equal(t, "64Mi", d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String(), "v1beta1's resources")
		waitReconciled(t, alpha, "old")
		waitReconciled(t, alpha, "new")
	})

	t.Run("AFieldOnlyTheNewVersionHasSurvivesAWriteThroughTheOld", func(t *testing.T) {
		m := get(alpha, "new")
		require.NoError(t, unstructured.SetNestedField(m.Object, int64(3), "spec", "size"))
		_, err := alpha.Update(t.Context(), m, metav1.UpdateOptions{FieldManager: "old-client"})
		require.NoError(t, err)
		got := get(beta, "new")
		require.Equal(t, int64(3), nested(t, got, "spec", "size"), "the write through v1alpha1")
		require.Equal(t, limits, nested(t, got, "spec", "resources"), "v1beta1's resources, kept")
		controlplanetest.Eventually(t, 10*time.Second, "the Deployment scaled to 3", func(ctx context.Context) (bool, error) {
			d, err := e.Kube.AppsV1().Deployments(ns).Get(ctx, "new", metav1.GetOptions{})
			return err == nil && *d.Spec.Replicas == 3 && d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().String() == "64Mi", err
		})
	})

	t.Run("ServerSideApplyAtEachVersionByTwoManagersWithoutConflict", func(t *testing.T) {
		apply := func(ri dynamic.ResourceInterface, manager string, m *unstructured.Unstructured) *unstructured.Unstructured {
			t.Helper()
			b, err := json.Marshal(m.Object)
			require.NoError(t, err)
			got, err := ri.Patch(t.Context(), m.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: manager, FieldValidation: "Strict"})
			require.NoError(t, err, manager)
			return got
		}
		// The old client applies size at v1alpha1, the non-storage
		// version; the new one resources at v1beta1.
		apply(alpha, "old-client", memcached("v1alpha1", "ssa", map[string]any{"size": int64(1)}))
		apply(beta, "new-client", memcached("v1beta1", "ssa", map[string]any{"resources": limits}))
		apply(alpha, "old-client", memcached("v1alpha1", "ssa", map[string]any{"size": int64(2)}))
		got := get(beta, "ssa")
		require.Equal(t, int64(2), nested(t, got, "spec", "size"))
		require.Equal(t, limits, nested(t, got, "spec", "resources"), "the old client's apply leaves the new client's field")
		managers := map[string]string{}
		for _, f := range got.GetManagedFields() {
			if f.Operation == metav1.ManagedFieldsOperationApply && strings.HasSuffix(f.Manager, "-client") {
				managers[f.Manager] = f.APIVersion
			}
		}
		require.Equal(t, map[string]string{"old-client": "cache.example.com/v1alpha1", "new-client": "cache.example.com/v1beta1"}, managers)
		waitDeployment(t, e.Kube, ns, "ssa")
	})

	t.Run("KubectlReadsAtBothVersions", func(t *testing.T) {
		kubectl := func(args ...string) string {
			t.Helper()
			cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", abs(t, e.Cluster.Kubeconfig), "-n", ns}, args...)...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			return string(out)
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(kubectl("get", "memcacheds.v1alpha1.cache.example.com", "new", "-o", "json")), &m))
		require.Equal(t, "cache.example.com/v1alpha1", m["apiVersion"])
		require.NoError(t, json.Unmarshal([]byte(kubectl("get", "memcacheds.v1beta1.cache.example.com", "old", "-o", "json")), &m))
		require.Equal(t, "cache.example.com/v1beta1", m["apiVersion"])
		// kubectl get mc reads the preferred version, v1beta1, with its
		// columns.
		table := kubectl("get", "mc")
		require.Contains(t, table, "SIZE")
		for _, name := range []string{"old", "new", "ssa"} {
			require.Contains(t, table, name)
		}
		require.Contains(t, kubectl("get", "memcacheds.v1alpha1.cache.example.com"), "SIZE", "v1alpha1's columns")
	})

	t.Run("TheAppsWebhookConverted", func(t *testing.T) {
		m, ok := tel.Metric("github.com/z5labs/humus/kube/conversion", "humus.kube.conversion.objects")
		require.True(t, ok)
		pairs := map[string]bool{}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			from, _ := dp.Attributes.Value("humus.kube.conversion.from")
			to, _ := dp.Attributes.Value("humus.kube.conversion.to")
			outcome, _ := dp.Attributes.Value("humus.kube.conversion.outcome")
			pairs[from.AsString()+">"+to.AsString()+" "+outcome.AsString()] = true
		}
		require.True(t, pairs["v1alpha1>v1beta1 converted"], "%v", pairs)
		require.True(t, pairs["v1beta1>v1alpha1 converted"], "%v", pairs)
		for p := range pairs {
			require.Contains(t, p, " converted", "no conversion failed")
		}
	})

	// Deleted while the App runs, to run their finalizer.
	for _, name := range []string{"old", "new", "ssa"} {
		deleteMemcached(t, alpha, name)
	}
	require.Equal(t, 0, a.Terminate(t))
}

// startServingWebhooks installs the Memcached CRD with its conversion
// webhook's clientConfig pointed at the test's Webhooks (apptest's test
// CA), and starts the App as replica-0 in ns, serving its webhooks there.
// It returns the Webhooks, the App's telemetry and the App, once its
// webhooks serve.
func startServingWebhooks(t *testing.T, e apptest.Env, ns string) (*apptest.Webhooks, *humustest.Telemetry, *apptest.App) {
	t.Helper()
	webhooks := apptest.NewWebhooks(t)
	crd, err := app.Memcached.CRDYAML()
	require.NoError(t, err)
	crdPath := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(crdPath, crd, 0o600))
	e.InstallCRD(t, webhooks.RedirectFile(t, crdPath), crdName)

	cfg := config(t, e, ns, "replica-0")
	cfg.Webhooks = webhooks.Config()
	tel := apptest.NewTelemetry(t)
	a := apptest.Start(t, app.New(cfg), humus.OSHost(), humus.WithTelemetry(tel.Build))
	webhooks.WaitServing(t)
	return webhooks, tel, a
}

// nested returns the field of u at path.
func nested(t *testing.T, u *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldCopy(u.Object, path...)
	require.NoError(t, err)
	require.True(t, ok, "%s in %v", strings.Join(path, "."), u.Object)
	return v
}
