package kube

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestOwnerKeyNamesTheControllingOwnerOfTheControllersKind(t *testing.T) {
	widgetsController := &Controller{group: "test.example.com", kind: "Widget", scope: Namespaced}
	namespacesController := &Controller{group: "", kind: "Namespace", scope: Cluster}
	owned := func(refs ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "team-a", OwnerReferences: refs}}
	}
	ref := func(apiVersion, kind, name string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: "uid", Controller: ptr.To(controller)}
	}
	for _, tc := range []struct {
		name string
		c    *Controller
		obj  any
		want string // "" for none
	}{
		{"controlled by a Widget", widgetsController, owned(ref("test.example.com/v1", "Widget", "w1", true)), "team-a/w1"},
		{"controlled by a Widget of another version", widgetsController, owned(ref("test.example.com/v2", "Widget", "w1", true)), "team-a/w1"},
		{"owned, not controlled", widgetsController, owned(ref("test.example.com/v1", "Widget", "w1", false)), ""},
		{"controlled by another group's Widget", widgetsController, owned(ref("other.example.com/v1", "Widget", "w1", true)), ""},
		{"controlled by another kind", widgetsController, owned(ref("test.example.com/v1", "Gadget", "w1", true)), ""},
		{"no owner", widgetsController, owned(), ""},
		{"a tombstone", widgetsController, cache.DeletedFinalStateUnknown{Key: "team-a/child", Obj: owned(ref("test.example.com/v1", "Widget", "w1", true))}, "team-a/w1"},
		{"not an object", widgetsController, "team-a/child", ""},
		{"a cluster-scoped owner", namespacesController, owned(ref("v1", "Namespace", "team-a", true)), "team-a"},
		// Kubernetes' garbage collector reports such a reference as invalid:
		// a cluster-scoped dependent can't have a namespaced owner.
		{"a cluster-scoped child naming a namespaced owner", widgetsController, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "child", OwnerReferences: []metav1.OwnerReference{ref("test.example.com/v1", "Widget", "w1", true)}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, ok := tc.c.ownerKey(tc.obj)
			require.Equal(t, tc.want != "", ok)
			require.Equal(t, tc.want, key)
		})
	}
}

// A child whose controller owner reference another writer moves from one
// owner to another, or removes, reconciles the owner it was taken from, as
// controller-runtime's EnqueueRequestForOwner queues the owners of both
// the old and the new object.
func TestAChildTakenFromItsOwnerReconcilesThatOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 1))
		var n counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n), Owns(configMapGVR))
		s := serve(t, c)
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 1, "w2": 1}, n.get())

		controlledBy := func(owner string) metav1.OwnerReference {
			return metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: owner, UID: types.UID("uid-" + owner), Controller: ptr.To(true)}
		}
		md := f.metadata.Tracker()
		require.NoError(t, md.Create(configMapGVR, ownedConfigMap(testNamespace, "child", controlledBy("w1")), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 2, "w2": 1}, n.get(), "the child's creation reconciles its owner")

		require.NoError(t, md.Update(configMapGVR, ownedConfigMap(testNamespace, "child", controlledBy("w2")), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 3, "w2": 2}, n.get(), "moved to w2, the child reconciles both w1, which lost it, and w2")

		require.NoError(t, md.Update(configMapGVR, ownedConfigMap(testNamespace, "child"), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 3, "w2": 3}, n.get(), "its owner reference removed, it reconciles w2, which lost it")

		require.NoError(t, md.Update(configMapGVR, ownedConfigMap(testNamespace, "child", controlledBy("w1")), testNamespace))
		synctest.Wait()
		require.Equal(t, map[string]int{"w1": 4, "w2": 3}, n.get(), "given back to w1, it reconciles w1 alone")

		require.NoError(t, s.stop(t))
	})
}

// An Owns Lister's copies are the caller's to change: a change to one's
// owner references, whose Controller and BlockOwnerDeletion are pointers,
// never reaches the cache, nor another reader's copy (run with -race).
func TestAnOwnsListersCopyOwnsItsOwnerReferences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		ref := metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "uid-w1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		require.NoError(t, f.metadata.Tracker().Create(configMapGVR, ownedConfigMap(testNamespace, "child", ref), testNamespace))
		var n counter
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), noStatus(&n), Owns(configMapGVR))
		s := serve(t, c)
		synctest.Wait()
		children, err := NewLister[metav1.PartialObjectMetadata](c, configMapGVR)
		require.NoError(t, err)

		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				got, err := children.Get(testNamespace, "child")
				if err != nil {
					t.Error(err)
					return
				}
				*got.OwnerReferences[0].Controller = false
				*got.OwnerReferences[0].BlockOwnerDeletion = false
				all, err := children.List(testNamespace, nil)
				if err != nil {
					t.Error(err)
					return
				}
				*all[0].OwnerReferences[0].Controller = false
			})
		}
		wg.Wait()
		got, err := children.Get(testNamespace, "child")
		require.NoError(t, err)
		require.Equal(t, []metav1.OwnerReference{ref}, got.OwnerReferences, "the cache's owner references are as they were")
		key, ok := c.ownerKey(&got)
		require.True(t, ok)
		require.Equal(t, testNamespace+"/w1", key)

		require.NoError(t, s.stop(t))
	})
}
