package kube

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// TestPruneNeverDeletesAChildAdoptedAfterItsCheck: prune reads the stale
// child fresh, finds it its own and labelled, and deletes it; if another
// owner takes the child between that GET and the DELETE (its owner
// references and labels changed, its uid the same), the DELETE must fail
// its precondition rather than delete another owner's child. The fake's
// DELETE honours a resourceVersion precondition, as the API server does
// (the tracker ignores preconditions).
func TestPruneNeverDeletesAChildAdoptedAfterItsCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		id := ApplySetID("w1", testNamespace, "Widget", "test.example.com")
		w1 := newWidget("w1", 1)
		w1.SetLabels(map[string]string{ApplySetIDLabel: id})
		w1.SetAnnotations(map[string]string{applySetToolingAnnotation: applySetTooling, applySetGKsAnnotation: "ConfigMap"})
		f := newFakeCluster(t, w1, labelledConfigMap("stale", map[string]string{ApplySetPartOfLabel: id}, widgetRef("w1", true)))
		f.kube.Fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
		tracker := f.dynamic.Tracker()
		var once sync.Once
		f.dynamic.PrependReactor("get", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.(clienttesting.GetAction).GetName() != "stale" {
				return false, nil, nil
			}
			obj, err := tracker.Get(configMapGVR, testNamespace, "stale")
			if err != nil {
				return true, nil, err
			}
			seen := obj.DeepCopyObject()
			once.Do(func() {
				// Another controller adopts the child right after prune's GET.
				u := obj.(*unstructured.Unstructured).DeepCopy()
				u.SetOwnerReferences([]metav1.OwnerReference{widgetRef("w2", true)})
				u.SetLabels(nil)
				u.SetResourceVersion("2")
				require.NoError(t, tracker.Update(configMapGVR, u, testNamespace))
			})
			return true, seen, nil
		})
		f.dynamic.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
			d := a.(clienttesting.DeleteActionImpl)
			obj, err := tracker.Get(configMapGVR, testNamespace, d.GetName())
			if err != nil {
				return false, nil, nil
			}
			cur := obj.(*unstructured.Unstructured)
			if p := d.GetDeleteOptions().Preconditions; p != nil {
				if (p.UID != nil && *p.UID != cur.GetUID()) || (p.ResourceVersion != nil && *p.ResourceVersion != cur.GetResourceVersion()) {
					return true, nil, apierrors.NewConflict(configMapGVR.GroupResource(), d.GetName(), nil)
				}
			}
			return false, nil, nil
		})
		r := widgets()
		r.Labels = map[string]string{ApplySetParentTypeLabel: "true"}
		var n counter
		c, err := newController(&humus.Setup{}, f.clients(), nil, testSettings(), r, noStatus(&n), Owns(configMapGVR, CacheObjects(), Prune()))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()
		require.True(t, f.exists(configMapGVR, testNamespace, "stale"), "the child another owner adopted after prune's check was deleted")
		require.NoError(t, s.stop(t))
	})
}
