package kube

import (
	"github.com/z5labs/humus/kube/internal/objcache"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestTheCacheKeepsAnObjectsJSONWithoutManagedFieldsAndTheMetadataTheControllerReads(t *testing.T) {
	u := newWidget("w1", 3)
	u.SetResourceVersion("42")
	u.SetGeneration(7)
	u.SetFinalizers([]string{widgetFinalizer})
	now := metav1.Unix(1_800_000_000, 0)
	u.SetDeletionTimestamp(&now)

	obj, err := objcache.CompactObject(u.DeepCopy())
	require.NoError(t, err)
	c, ok := obj.(*cachedObject)
	require.True(t, ok, "the transform caches a *cachedObject, not a %T", obj)
	again, err := objcache.CompactObject(c)
	require.NoError(t, err)
	require.Same(t, c, again, "the transform is idempotent, as client-go asks")

	require.NotContains(t, c.Raw(), "managedFields")
	require.Equal(t, testNamespace+"/w1", must(cache.MetaNamespaceKeyFunc(c)))
	require.EqualValues(t, "uid-w1", c.GetUID())
	require.Equal(t, "42", c.GetResourceVersion())
	require.EqualValues(t, 7, c.GetGeneration())
	require.Equal(t, []string{widgetFinalizer}, c.GetFinalizers())
	require.True(t, now.Equal(c.GetDeletionTimestamp()))

	var w widget
	require.NoError(t, c.Decode(&w))
	require.Equal(t, "w1", w.Name)
	require.EqualValues(t, 3, w.Spec.Size)
	require.Equal(t, []string{widgetFinalizer}, w.Finalizers)
	require.Empty(t, w.ManagedFields)

	w.Spec.Size = 4
	w.Finalizers[0] = "changed"
	var w2 widget
	require.NoError(t, c.Decode(&w2))
	require.EqualValues(t, 3, w2.Spec.Size, "each decode is its caller's own copy")
	require.Equal(t, []string{widgetFinalizer}, c.GetFinalizers())
}

func TestAnOwnedResourcesCacheKeepsWhatOwnsReads(t *testing.T) {
	ref := metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "uid-w1", Controller: ptr.To(true)}
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "child", Namespace: testNamespace, UID: "uid-child", ResourceVersion: "9",
		Labels:          map[string]string{"a": "b"},
		Annotations:     map[string]string{"c": "d"},
		OwnerReferences: []metav1.OwnerReference{ref},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	obj, err := objcache.CompactMetadata(m)
	require.NoError(t, err)
	c := obj.(*cachedObject)
	require.Equal(t, testNamespace+"/child", c.Key())
	require.EqualValues(t, "uid-child", c.GetUID())
	require.Equal(t, "9", c.GetResourceVersion())
	require.Equal(t, []metav1.OwnerReference{ref}, c.GetOwnerReferences())
	require.Nil(t, c.GetLabels(), "nor the labels")
	require.Nil(t, c.GetAnnotations(), "nor the annotations")
	require.Nil(t, c.GetManagedFields(), "nor the managed fields")
	require.Empty(t, c.Raw(), "nor the JSON")

	var w widget
	require.Error(t, c.Decode(&w), "an owned resource's cache holds no JSON")
	key, ok := (&Controller{group: "test.example.com", kind: "Widget", scope: Namespaced}).ownerKey(c)
	require.True(t, ok)
	require.Equal(t, testNamespace+"/w1", key)
}

func TestADecodeOfANumberTooLargeForItsFieldNamesTheField(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	require.NoError(t, indexer.Add(cached(t, newWidget("huge", 1<<40))))
	item, exists, err := indexer.GetByKey(testNamespace + "/huge")
	require.NoError(t, err)
	require.True(t, exists)
	var w widget
	require.NoError(t, item.(*cachedObject).Decode(&w))
	require.EqualValues(t, 1<<40, w.Spec.Size)
	var narrow narrowWidget
	require.ErrorContains(t, item.(*cachedObject).Decode(&narrow), "field spec.size", "a number too large for its field is an error")
}
