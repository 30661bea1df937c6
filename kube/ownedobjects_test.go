package kube

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/z5labs/humus/kube/internal/objcache"
)

// widgetRef is a controller owner reference to the Widget name, or, with
// controller false, a plain owner reference.
func widgetRef(name string, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: name,
		UID: types.UID("uid-" + name), Controller: ptr.To(controller)}
}

// wholeConfigMap is ConfigMap name, holding data v, as the API server
// serves it.
func wholeConfigMap(name, v string, refs ...metav1.OwnerReference) *unstructured.Unstructured {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, UID: types.UID("cm-" + name), ResourceVersion: "1", OwnerReferences: refs},
		Data:       map[string]string{"v": v},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// An Owns given CacheObjects caches its objects whole, with their owner
// references: a Reconciler reads its own children's data through
// ControlledBy, one lookup of the index by controller owner, which leaves
// out another owner's child, a child it is a mere owner of, and an object
// no one owns; and a child's creation reconciles its owner, as Owns' does.
func TestAnOwnsGivenCacheObjectsHandsAnOwnersChildrenWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 1),
			wholeConfigMap("a", "1", widgetRef("w1", true)),
			wholeConfigMap("b", "2", widgetRef("w2", true)),
			wholeConfigMap("c", "3", widgetRef("w1", false)),
			wholeConfigMap("d", "4"))
		var mu sync.Mutex
		seen := map[string][]string{}
		rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			l, err := ListerFrom[corev1.ConfigMap](ctx, configMapGVR)
			if err != nil {
				return Result[widgetStatus]{}, err
			}
			children, err := l.ControlledBy(w.UID)
			if err != nil {
				return Result[widgetStatus]{}, err
			}
			var got []string
			for _, cm := range children {
				got = append(got, cm.Name+"="+cm.Data["v"])
			}
			slices.Sort(got)
			mu.Lock()
			defer mu.Unlock()
			seen[w.Name] = got
			return Result[widgetStatus]{}, nil
		})
		c := newWidgetController(t, f, humus.Telemetry{}, testSettings(), rec, Owns(configMapGVR, CacheObjects()))
		s := serve(t, c)
		synctest.Wait()
		read := func() map[string][]string {
			mu.Lock()
			defer mu.Unlock()
			return cloneSeen(seen)
		}
		require.Equal(t, map[string][]string{"w1": {"a=1"}, "w2": {"b=2"}}, read())

		f.create(t, configMapGVR, wholeConfigMap("e", "5", widgetRef("w1", true)))
		synctest.Wait()
		require.Equal(t, map[string][]string{"w1": {"a=1", "e=5"}, "w2": {"b=2"}}, read(), "a new child reconciles its owner, which reads it whole")

		// A List reads the whole cache, owned or not.
		l, err := NewLister[corev1.ConfigMap](c, configMapGVR)
		require.NoError(t, err)
		all, err := l.List(testNamespace, nil)
		require.NoError(t, err)
		require.Len(t, all, 5)

		require.NoError(t, s.stop(t))
	})
}

func cloneSeen(m map[string][]string) map[string][]string {
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// A whole owned object read straight from the API server's JSON, as the
// cache's client reads it, keeps its owner references: its events queue
// its owner, but for the version its owner's reconcile created.
func TestAWholeOwnedObjectsOwnCreationDoesntComeBack(t *testing.T) {
	c := ownsConfigMaps()
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	h := c.ownerHandler(queue, schema.GroupResource{Resource: "configmaps"})
	whole := func(rv string) *cachedObject {
		t.Helper()
		obj, err := objcache.ObjectFromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"w1","namespace":"team-a","uid":"cm-uid","resourceVersion":"` + rv + `","ownerReferences":[{"apiVersion":"test.example.com/v1","kind":"Widget","name":"w1","uid":"w-uid","controller":true}]},"data":{"a":"b"}}`))
		require.NoError(t, err)
		owned, err := objcache.CompactOwned(obj)
		require.NoError(t, err)
		return owned.(*cachedObject)
	}
	require.Equal(t, []metav1.OwnerReference{{APIVersion: "test.example.com/v1", Kind: "Widget", Name: "w1", UID: "w-uid", Controller: ptr.To(true)}},
		whole("5").GetOwnerReferences())
	keys, err := controllerUIDIndexFunc(whole("5"))
	require.NoError(t, err)
	require.Equal(t, []string{"w-uid"}, keys)

	applyConfigMap(t, c, answering{body: configMapAnswer}, withReconciling(t.Context(), c, "team-a/w1"))
	h.OnAdd(whole("5"), false)
	require.Zero(t, queue.Len(), "the add of the version the reconcile's apply created isn't queued")
	h.OnUpdate(whole("5"), whole("6"))
	require.Equal(t, 1, queue.Len(), "another change to it is")
	key, _ := queue.Get()
	require.Equal(t, "team-a/w1", key)
	queue.Done(key)
}

// ControlledBy reads only an Owns' cache, which alone has the index.
func TestControlledByReadsAnOwnsCache(t *testing.T) {
	rt, err := NewReconcileTest("test-controller",
		TestObjects(configMapGVR, wholeConfigMap("a", "1", widgetRef("w1", true))),
		TestOwned(deploymentGVR, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: testNamespace,
			OwnerReferences: []metav1.OwnerReference{widgetRef("w1", true)}}}))
	require.NoError(t, err)
	ctx := rt.Context(t.Context())
	cms, err := ListerFrom[corev1.ConfigMap](ctx, configMapGVR)
	require.NoError(t, err)
	_, err = cms.ControlledBy("uid-w1")
	require.ErrorContains(t, err, "isn't an Owns'")
	deps, err := ListerFrom[metav1.PartialObjectMetadata](ctx, deploymentGVR)
	require.NoError(t, err)
	got, err := deps.ControlledBy("uid-w1")
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "d", got[0].Name)
	none, err := deps.ControlledBy("uid-w2")
	require.NoError(t, err)
	require.Empty(t, none)
}
