package objcache

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// An Object is one per cached object: at 96 bytes a cached Secret held
// 1.50 times its JSON (BenchmarkWatchesCachedObjectBytes); its strings as
// spans keep it in the 64-byte size class.
func TestAnObjectIsSixtyFourBytes(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(Object{}), uintptr(64))
}

// An owned object's rare part is one per cached object too, as each has
// its owner references: at 80 bytes a Job owned one to an owner held 1.51
// times its JSON (BenchmarkOwnsCachedObjectBytes); its slices and text as
// a pointer and a length keep it in the 48-byte size class.
func TestAnObjectsRarePartIsFortyEightBytes(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(cachedRare{}), uintptr(48))
}

func TestAnObjectsRarePartReadsBackWhatWasSet(t *testing.T) {
	c := &Object{}
	require.Nil(t, c.GetFinalizers())
	require.Nil(t, c.GetOwnerReferences())
	fs := []string{"a", "b"}
	refs := []metav1.OwnerReference{{Kind: "Website", Name: "w", UID: "u"}, {Kind: "Website", Name: "v", UID: "t"}}
	c.SetFinalizers(fs)
	c.SetOwnerReferences(refs)
	c.SetName("x\u0031")
	require.Equal(t, fs, c.GetFinalizers())
	require.Equal(t, refs, c.GetOwnerReferences())
	require.Equal(t, "x\u0031", c.GetName())
	c.SetFinalizers(nil)
	require.Nil(t, c.GetFinalizers())
	require.Equal(t, refs, c.GetOwnerReferences())
	c.SetOwnerReferences(nil)
	require.Nil(t, c.GetOwnerReferences())
	require.NotNil(t, c.rare, "it holds the name's text")
}

func TestAnObjectsMetadataIsReadBackFromItsSpans(t *testing.T) {
	// From the API server's JSON: every string in raw, no rare part.
	obj, err := ObjectFromJSON([]byte(scanSeeds[0]))
	require.NoError(t, err)
	c := obj.(*Object)
	require.Equal(t, "w1", c.GetName())
	require.Equal(t, "default", c.GetNamespace())
	require.Equal(t, types.UID("1edcd1aa-22af-4adb-864a-9336a8ff05f3"), c.GetUID())
	require.Equal(t, "222", c.GetResourceVersion())
	require.Equal(t, "default/w1", c.Key())
	require.NotNil(t, c.rare, "it has a finalizer")
	require.Empty(t, c.rare.str(), "raw holds every string")

	// Escaped: the unescaped text isn't in raw, so rare holds it.
	obj, err = ObjectFromJSON([]byte(`{"kind":"Widget","metadata":{"name":"w\u0031","namespace":"n\u0073","uid":"u","resourceVersion":"5"}}`))
	require.NoError(t, err)
	c = obj.(*Object)
	require.Equal(t, "w1", c.GetName())
	require.Equal(t, "ns", c.GetNamespace())
	require.Equal(t, types.UID("u"), c.GetUID())
	require.Equal(t, "5", c.GetResourceVersion())
	require.Equal(t, "ns/w1", c.Key())

	// From an unstructured object, whose strings are its own.
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret"}}
	u.SetName("s1")
	u.SetNamespace("bench")
	u.SetUID("0b5f")
	u.SetResourceVersion("17")
	u.SetGeneration(3)
	c, err = NewObject(u)
	require.NoError(t, err)
	require.Equal(t, []string{"s1", "bench", "0b5f", "17"}, []string{c.GetName(), c.GetNamespace(), string(c.GetUID()), c.GetResourceVersion()})
	require.Equal(t, int64(3), c.GetGeneration())
	require.Nil(t, c.rare, "raw holds every string")

	// An owned resource's metadata, which keeps no raw.
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "d1", Namespace: "bench", UID: "9a", ResourceVersion: "40",
		OwnerReferences: []metav1.OwnerReference{{Name: "w1", UID: "1e", Kind: "Widget"}}}}
	c = NewMetadata(m)
	require.Equal(t, []string{"d1", "bench", "9a", "40"}, []string{c.GetName(), c.GetNamespace(), string(c.GetUID()), c.GetResourceVersion()})
	require.Equal(t, m.OwnerReferences, c.GetOwnerReferences())
	require.Empty(t, c.Raw())

	// A setter's string that isn't in raw is kept too; one that is costs
	// nothing.
	c, err = NewObject(u)
	require.NoError(t, err)
	c.SetResourceVersion("18")
	require.Equal(t, "18", c.GetResourceVersion())
	require.Equal(t, "s1", c.GetName())
	c.SetName(c.Raw()[:1])
	require.Equal(t, "{", c.GetName())
}
