package kube

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	"github.com/z5labs/humus/kube/internal/apitransport"
	"github.com/z5labs/humus/kube/internal/applyset"
)

// labelledConfigMap is wholeConfigMap with labels.
func labelledConfigMap(name string, labels map[string]string, refs ...metav1.OwnerReference) *unstructured.Unstructured {
	u := wholeConfigMap(name, name, refs...)
	u.SetLabels(labels)
	return u
}

// A reconcile that succeeds prunes, of the children the index by
// controller owner names under its object, those labelled part of its
// ApplySet that it didn't write (here, none: the fakes' clients bypass the
// transport, so the reconcile writes nothing); an unlabelled child,
// another owner's child and a hand-made object with the label stay. The
// "prune preview" record names what goes first; PruneDryRun deletes
// nothing.
func TestPruneDeletesOnlyTheOwnersLabelledChildren(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  WatchOption
		dry  bool
	}{{"Prune", Prune(), false}, {"PruneDryRun", PruneDryRun(), true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				id := ApplySetID("w1", testNamespace, "Widget", "test.example.com")
				partOf := map[string]string{ApplySetPartOfLabel: id}
				w1 := newWidget("w1", 1)
				// The parent's ApplySet metadata, as a first prune applies
				// it (the fakes' apply keeps only finalizers).
				w1.SetLabels(map[string]string{ApplySetIDLabel: id})
				w1.SetAnnotations(map[string]string{applyset.ToolingAnnotation: applyset.Tooling, applyset.GroupKindsAnnotation: "ConfigMap"})
				f := newFakeCluster(t, w1,
					labelledConfigMap("stale", partOf, widgetRef("w1", true)),
					labelledConfigMap("unlabelled", nil, widgetRef("w1", true)),
					labelledConfigMap("of-w2", partOf, widgetRef("w2", true)),
					labelledConfigMap("by-hand", partOf))
				f.kube.Fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
				tel := humustest.NewTelemetry(t)
				r := widgets()
				r.Labels = map[string]string{ApplySetParentTypeLabel: "true"}
				var n counter
				c, err := newController(&humus.Setup{Telemetry: tel.Telemetry}, f.clients(), nil, testSettings(), r, noStatus(&n),
					Owns(configMapGVR, CacheObjects(), tc.opt))
				require.NoError(t, err)
				s := serve(t, c)
				synctest.Wait()
				// A pruned child's deletion is news to its owner, as any
				// child's is: one more reconcile, which prunes nothing.
				reconciles := 2
				if tc.dry {
					reconciles = 1
				}
				require.Equal(t, map[string]int{"w1": reconciles}, n.get())

				require.Equal(t, tc.dry, f.exists(configMapGVR, testNamespace, "stale"), "the stale child is pruned, unless dry")
				for _, name := range []string{"unlabelled", "of-w2", "by-hand"} {
					require.True(t, f.exists(configMapGVR, testNamespace, name), name+" stays")
				}
				var previews, pruned []string
				for _, rec := range tel.Records() {
					var children string
					rec.WalkAttributes(func(kv attribute.KeyValue) bool {
						if kv.Key == "children" || kv.Key == "child" {
							children = kv.Value.Emit()
						}
						return true
					})
					switch rec.Body().Emit() {
					case "prune preview":
						previews = append(previews, children)
					case "pruned":
						require.NotEmpty(t, previews, "the preview comes before any deletion")
						pruned = append(pruned, children)
					}
				}
				require.Len(t, previews, 1)
				require.True(t, strings.Contains(previews[0], testNamespace+"/stale") && !strings.Contains(previews[0], "unlabelled"), previews[0])
				if tc.dry {
					require.Empty(t, pruned)
				} else {
					require.Equal(t, []string{testNamespace + "/stale"}, pruned)
				}
				require.NoError(t, s.stop(t))
			})
		})
	}
}

// Prune is an Owns' alone, and its Resource must be an ApplySet parent
// kubectl takes.
func TestPruneIsChecked(t *testing.T) {
	f := newFakeCluster(t)
	var n counter
	_, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), widgets(), noStatus(&n),
		Owns(configMapGVR, Prune()),
		Watches(deploymentGVR, byConfigLabel, Prune()))
	require.Error(t, err)
	require.ErrorContains(t, err, "Watches(apps/v1, Resource=deployments) is given Prune: only an Owns prunes")
	require.ErrorContains(t, err, `Owns(/v1, Resource=configmaps) prunes, so Widget is an ApplySet parent, which kubectl takes only from a CRD labelled applyset.kubernetes.io/is-parent-type: "true"`)

	r := widgets()
	r.Labels = map[string]string{ApplySetParentTypeLabel: "true"}
	_, err = newController(&humus.Setup{}, f.clients(), nil, testSettings(), r, noStatus(&n), Owns(configMapGVR, PruneDryRun()))
	require.NoError(t, err)
}

// ApplySetLabels names the ApplySet of the object a reconcile reconciles,
// and nothing outside one.
func TestApplySetLabelsNameTheReconciledObjectsSet(t *testing.T) {
	c := &Controller{group: "test.example.com", kind: "Widget"}
	require.Equal(t, map[string]string{ApplySetPartOfLabel: ApplySetID("w1", "team-a", "Widget", "test.example.com")},
		ApplySetLabels(withReconciling(t.Context(), c, "team-a/w1")))
	require.Equal(t, map[string]string{ApplySetPartOfLabel: ApplySetID("n1", "", "Widget", "test.example.com")},
		ApplySetLabels(withReconciling(t.Context(), c, "n1")))
	require.Nil(t, ApplySetLabels(context.Background()))
	require.Regexp(t, `^applyset-[A-Za-z0-9_-]{43}-v1$`, ApplySetID("w1", "team-a", "Widget", "test.example.com"))
	require.Equal(t, []string{applyset.PartOfLabel, applyset.IDLabel, applyset.ParentTypeLabel},
		[]string{ApplySetPartOfLabel, ApplySetIDLabel, ApplySetParentTypeLabel}, "kube's labels are the ones internal/applyset reads and writes")
}

// A reconcile that fails or panics prunes nothing.
func TestAFailedReconcilePrunesNothing(t *testing.T) {
	for name, rec := range map[string]Reconciler[widgetSpec, widgetStatus]{
		"Error": ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
			return Result[widgetStatus]{}, errors.New("failed")
		}),
		"Panic": ReconcilerFunc[widgetSpec, widgetStatus](func(context.Context, widget) (Result[widgetStatus], error) {
			panic("the reconcile panicked")
		}),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				id := ApplySetID("w1", testNamespace, "Widget", "test.example.com")
				f := newFakeCluster(t, newWidget("w1", 1),
					labelledConfigMap("stale", map[string]string{ApplySetPartOfLabel: id}, widgetRef("w1", true)))
				f.kube.Fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
				r := widgets()
				r.Labels = map[string]string{ApplySetParentTypeLabel: "true"}
				c, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), r, rec, Owns(configMapGVR, CacheObjects(), Prune()))
				require.NoError(t, err)
				s := serve(t, c)
				synctest.Wait()
				require.True(t, f.exists(configMapGVR, testNamespace, "stale"))
				require.NoError(t, s.stop(t))
			})
		})
	}
}

// The resources the ApplySet's group-kinds are found from are found once,
// as the group-kinds are, not on every reconcile that prunes.
func TestThePrunedResourcesAreFoundOnce(t *testing.T) {
	c := &Controller{owns: []informerSpec{
		{gvr: configMapGVR, prune: pruneDelete},
		{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
	}}
	require.Equal(t, []schema.GroupVersionResource{configMapGVR}, c.prunedResources())
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = c.prunedResources() }))
}

// A child the reconcile wrote only through a subresource, a Deployment's
// replicas through /scale, is a child it wrote, as one written through
// /status or whole is: each write, sent through the transport's write
// hook with the reconcile's context, keeps its child from the prune.
func TestAChildWrittenThroughASubresourceIsKept(t *testing.T) {
	c := &Controller{owns: []informerSpec{{gvr: deploymentGVR, prune: pruneDelete}}}
	rt := apitransport.WriteHooks{Next: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	})}
	ctx := withReconciling(context.Background(), c, testNamespace+"/w1")
	for _, tc := range []struct{ method, child, path string }{
		{http.MethodPut, "by-scale-put", "/scale"},
		{http.MethodPatch, "by-scale-patch", "/scale"},
		{http.MethodPatch, "by-status", "/status"},
		{http.MethodPatch, "whole", ""},
	} {
		resp, err := rt.RoundTrip(httptest.NewRequestWithContext(ctx, tc.method,
			"https://kube/apis/apps/v1/namespaces/"+testNamespace+"/deployments/"+tc.child+tc.path, http.NoBody))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.True(t, scopeOf(ctx).applied.Has(deploymentGVR.GroupResource(), testNamespace+"/"+tc.child),
			"%s %s%s is a write of %s", tc.method, tc.child, tc.path, tc.child)
	}
}

// The ApplySet parent's apply of its label and annotations, on the first
// reconcile, is the controller's own write: its event doesn't reconcile
// the object a second time. One reconcile for the object's creation and
// one for a change of its spec, once settled, with the status each writes
// filtered as well.
func TestTheApplySetParentsApplyIsNoNews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		f.kube.Fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
		// The ApplySet's apply sets the labels and annotations it names,
		// as the API server's does (the harness's apply keeps only
		// finalizers).
		var parentApplies int
		f.dynamic.PrependReactor("patch", "widgets", func(action clienttesting.Action) (bool, runtime.Object, error) {
			pa, ok := action.(clienttesting.PatchActionImpl)
			if !ok || pa.GetPatchType() != types.ApplyPatchType || pa.GetPatchOptions().FieldManager != controllerName+"-applyset" {
				return false, nil, nil
			}
			var applied unstructured.Unstructured
			if err := applied.UnmarshalJSON(pa.GetPatch()); err != nil {
				return true, nil, err
			}
			u := f.get(t, widgetGVR, pa.GetNamespace(), pa.GetName()).DeepCopy()
			labels, annotations := u.GetLabels(), u.GetAnnotations()
			if labels == nil {
				labels = map[string]string{}
			}
			if annotations == nil {
				annotations = map[string]string{}
			}
			maps.Copy(labels, applied.GetLabels())
			maps.Copy(annotations, applied.GetAnnotations())
			u.SetLabels(labels)
			u.SetAnnotations(annotations)
			u.SetResourceVersion(f.nextResourceVersion())
			parentApplies++
			return true, u, f.dynamic.Tracker().Update(widgetGVR, u, pa.GetNamespace())
		})
		r := widgets()
		r.Labels = map[string]string{ApplySetParentTypeLabel: "true"}
		var n counter
		c, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), r,
			ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
				n.add(w.Name)
				return Result[widgetStatus]{Status: &widgetStatus{Seen: w.Spec.Size}}, nil
			}),
			Owns(configMapGVR, CacheObjects(), Prune()))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, 1, parentApplies, "the first reconcile applies the ApplySet's metadata")
		require.Equal(t, ApplySetID("w1", testNamespace, "Widget", "test.example.com"),
			f.get(t, widgetGVR, testNamespace, "w1").GetLabels()[ApplySetIDLabel])
		require.Equal(t, map[string]int{"w1": 1}, n.get(), "one reconcile for the creation")

		u := f.get(t, widgetGVR, testNamespace, "w1").DeepCopy()
		require.NoError(t, unstructured.SetNestedField(u.Object, int64(2), "spec", "size"))
		u.SetResourceVersion(f.nextResourceVersion())
		f.update(t, widgetGVR, u)
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2}, n.get(), "one reconcile for the change")
		require.Equal(t, 1, parentApplies, "the ApplySet's metadata is applied once")
		require.Len(t, f.statusApplies(), 2)
		require.Zero(t, c.echoes.Keys(), "no write is left awaiting its event")
		require.NoError(t, s.stop(t))
	})
}
