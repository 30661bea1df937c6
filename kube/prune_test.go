package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/attribute"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
