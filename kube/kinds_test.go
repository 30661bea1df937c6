package kube

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

func namespaces() Kind[corev1.Namespace] {
	return Kind[corev1.Namespace]{GVR: namespaceGVR, Kind: "Namespace", Scope: Cluster}
}

func newNamespace(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata":   map[string]any{"name": name, "uid": "uid-" + name},
		"spec":       map[string]any{"finalizers": []any{"kubernetes"}},
		"status":     map[string]any{"phase": "Active"},
	}}
}

// ownedConfigMap is a ConfigMap in namespace ns whose owner references are
// refs, as the metadata client serves it.
func ownedConfigMap(ns, name string, refs ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: refs},
	}
}

func TestKindControllerWithOwnsAndFinalize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newNamespace("team-a"), newNamespace("team-b"))
		const finalizer = "example.com/default-deny"
		var mu sync.Mutex
		var got []corev1.Namespace
		var teamA times // team-a's reconciles
		var finalized []string
		c, err := newKindController(&humus.Setup{}, f.clients(), nil, testSettings(), namespaces(),
			KindReconcilerFunc[corev1.Namespace](func(ctx context.Context, ns corev1.Namespace) (time.Duration, error) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, ns)
				if ns.Name == "team-a" && teamA.add() == 1 {
					return 10 * time.Second, nil
				}
				return 0, nil
			}),
			Owns(configMapGVR),
			Finalize(finalizer, func(ctx context.Context, ns corev1.Namespace) error {
				mu.Lock()
				defer mu.Unlock()
				finalized = append(finalized, ns.Name)
				return nil
			}))
		require.NoError(t, err)
		s := serve(t, c)
		synctest.Wait()
		reconciles := func(name string) int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, ns := range got {
				if ns.Name == name {
					n++
				}
			}
			return n
		}

		// client-go's own struct, decoded from the cache, with the
		// finalizer applied before the first reconcile.
		mu.Lock()
		require.NotEmpty(t, got)
		require.Equal(t, "Namespace", got[0].Kind)
		require.Equal(t, corev1.NamespaceActive, got[0].Status.Phase)
		mu.Unlock()
		for _, name := range []string{"team-a", "team-b"} {
			require.Equal(t, []string{finalizer}, f.get(t, namespaceGVR, "", name).GetFinalizers())
		}

		// after reconciles the object again.
		time.Sleep(11 * time.Second)
		synctest.Wait()
		at := teamA.get()
		require.GreaterOrEqual(t, len(at), 2)
		require.Equal(t, 10*time.Second, at[len(at)-1].Sub(at[0]))

		// A change to a resource it owns reconciles the owner, a cluster-
		// scoped Namespace owning a namespaced ConfigMap; one that another
		// kind controls, or that it owns without controlling, doesn't.
		before := reconciles("team-b")
		md := f.metadata.Tracker()
		require.NoError(t, md.Create(configMapGVR, ownedConfigMap("team-b", "not-controlled",
			metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "team-b", UID: "uid-team-b"}), "team-b"))
		require.NoError(t, md.Create(configMapGVR, ownedConfigMap("team-b", "other-kind",
			metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "team-b", Controller: ptr.To(true)}), "team-b"))
		synctest.Wait()
		require.Equal(t, before, reconciles("team-b"))
		require.NoError(t, md.Create(configMapGVR, ownedConfigMap("team-b", "default-deny",
			metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "team-b", UID: "uid-team-b", Controller: ptr.To(true)}), "team-b"))
		synctest.Wait()
		require.Equal(t, before+1, reconciles("team-b"))
		require.NoError(t, md.Delete(configMapGVR, "team-b", "default-deny"))
		synctest.Wait()
		require.Equal(t, before+2, reconciles("team-b"), "deleting the owned resource reconciles its owner, which puts it back")

		// Finalize runs on a deleting object, in place of the Reconciler.
		before = reconciles("team-a")
		f.markDeleted(t, namespaceGVR, "", "team-a")
		synctest.Wait()
		mu.Lock()
		require.Equal(t, []string{"team-a"}, finalized)
		mu.Unlock()
		require.Equal(t, before, reconciles("team-a"))
		require.False(t, f.exists(namespaceGVR, "", "team-a"))

		require.Empty(t, f.statusApplies(), "a Kind's status isn't the controller's")
		require.NoError(t, s.stop(t))
	})
}
