package applyset

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

const testNamespace = "default"

var configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// ownerRef is a controller owner reference to the widget of uid.
func ownerRef(uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "test.example.com/v1", Kind: "Widget", Name: string(uid), UID: uid, Controller: &yes}
}

// configMap is a ConfigMap of name, uid name-uid, with labels and refs.
func configMap(name string, labels map[string]string, refs ...metav1.OwnerReference) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(testNamespace)
	u.SetName(name)
	u.SetUID(types.UID(name + "-uid"))
	u.SetResourceVersion("1")
	u.SetLabels(labels)
	u.SetOwnerReferences(refs)
	return u
}

// preconditions makes c's DELETE of a ConfigMap honour a uid and
// resourceVersion precondition, as the API server does (the tracker
// ignores preconditions).
func preconditions(c *dynamicfake.FakeDynamicClient) {
	tracker := c.Tracker()
	c.PrependReactor("delete", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
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
}

func newPruner(c *dynamicfake.FakeDynamicClient) Pruner {
	return Pruner{Client: c, Log: func(context.Context) *slog.Logger { return slog.New(slog.DiscardHandler) }}
}

func exists(t *testing.T, c *dynamicfake.FakeDynamicClient, name string) bool {
	t.Helper()
	_, err := c.Tracker().Get(configMapGVR, testNamespace, name)
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// Of the children a cache names, Prune deletes those a fresh GET finds
// controlled by the parent and labelled part of its ApplySet: another
// owner's child, an unlabelled one, and one replaced (another uid) stay.
func TestPruneDeletesOnlyTheParentsLabelledChildren(t *testing.T) {
	id := ID("w1", testNamespace, "Widget", "test.example.com")
	partOf := map[string]string{PartOfLabel: id}
	replaced := configMap("replaced", partOf, ownerRef("w1"))
	replaced.SetUID("another-uid")
	c := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(),
		configMap("stale", partOf, ownerRef("w1")),
		configMap("unlabelled", nil, ownerRef("w1")),
		configMap("of-w2", partOf, ownerRef("w2")),
		replaced)
	preconditions(c)
	var stale []Child
	for _, name := range []string{"stale", "unlabelled", "of-w2", "replaced", "gone"} {
		stale = append(stale, Child{Namespace: testNamespace, Name: name, UID: types.UID(name + "-uid")})
	}
	parent := Parent{ID: id, UID: "w1", Name: "Widget default/w1"}

	require.NoError(t, newPruner(c).Prune(t.Context(), configMapGVR, parent, stale, true))
	require.True(t, exists(t, c, "stale"), "a dry run deletes nothing")

	require.NoError(t, newPruner(c).Prune(t.Context(), configMapGVR, parent, stale, false))
	require.False(t, exists(t, c, "stale"))
	for _, name := range []string{"unlabelled", "of-w2", "replaced"} {
		require.True(t, exists(t, c, name), name+" stays")
	}
}

// TestPruneNeverDeletesAChildAdoptedAfterItsCheck: prune reads the stale
// child fresh, finds it its own and labelled, and deletes it; if another
// owner takes the child between that GET and the DELETE (its owner
// references and labels changed, its uid the same), the DELETE must fail
// its precondition rather than delete another owner's child.
func TestPruneNeverDeletesAChildAdoptedAfterItsCheck(t *testing.T) {
	id := ID("w1", testNamespace, "Widget", "test.example.com")
	c := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), configMap("stale", map[string]string{PartOfLabel: id}, ownerRef("w1")))
	tracker := c.Tracker()
	var once sync.Once
	c.PrependReactor("get", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj, err := tracker.Get(configMapGVR, testNamespace, a.(clienttesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		seen := obj.DeepCopyObject()
		once.Do(func() {
			// Another controller adopts the child right after prune's GET.
			u := obj.(*unstructured.Unstructured).DeepCopy()
			u.SetOwnerReferences([]metav1.OwnerReference{ownerRef("w2")})
			u.SetLabels(nil)
			u.SetResourceVersion("2")
			require.NoError(t, tracker.Update(configMapGVR, u, testNamespace))
		})
		return true, seen, nil
	})
	preconditions(c)
	stale := []Child{{Namespace: testNamespace, Name: "stale", UID: "stale-uid"}}
	require.NoError(t, newPruner(c).Prune(t.Context(), configMapGVR, Parent{ID: id, UID: "w1", Name: "Widget default/w1"}, stale, false))
	require.True(t, exists(t, c, "stale"), "the child another owner adopted after prune's check was deleted")
}

// ID is kubectl's: applyset-, 43 characters of base64, -v1.
func TestIDIsKubectls(t *testing.T) {
	require.Regexp(t, `^applyset-[A-Za-z0-9_-]{43}-v1$`, ID("w1", "team-a", "Widget", "test.example.com"))
	require.NotEqual(t, ID("w1", "team-a", "Widget", "test.example.com"), ID("w1", "", "Widget", "test.example.com"))
}

// ParentMetadata is nothing for a parent that carries the set's metadata.
func TestParentMetadataOnlyWhenItChanges(t *testing.T) {
	md := ParentMetadata(nil, nil, "applyset-x-v1", "ConfigMap")
	require.Equal(t, map[string]any{
		"labels":      map[string]any{IDLabel: "applyset-x-v1"},
		"annotations": map[string]any{ToolingAnnotation: Tooling, GroupKindsAnnotation: "ConfigMap"},
	}, md)
	require.Nil(t, ParentMetadata(map[string]string{IDLabel: "applyset-x-v1"},
		map[string]string{ToolingAnnotation: Tooling, GroupKindsAnnotation: "ConfigMap"}, "applyset-x-v1", "ConfigMap"))
}
