package objcache

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// scanSeeds are objects as the API server writes them, and some it
// doesn't: spaces, escapes, managed fields anywhere in the metadata.
var scanSeeds = []string{
	`{"apiVersion":"test.example.com/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-12-01T15:12:35Z","finalizers":["controller.humus.example.com/cleanup"],"generation":1,"managedFields":[{"apiVersion":"test.example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:finalizers":{"v:\"controller.humus.example.com/cleanup\"":{}}}},"manager":"widgets","operation":"Apply","time":"2026-12-01T15:12:35Z"}],"name":"w1","namespace":"default","resourceVersion":"222","uid":"1edcd1aa-22af-4adb-864a-9336a8ff05f3"},"spec":{"size":1}}`,
	`{"metadata":{"managedFields":[],"name":"first"},"spec":{"size":2}}`,
	`{"metadata":{"name":"last","managedFields":[{"manager":"m"}]}}`,
	`{"metadata":{"managedFields":null}}`,
	` { "kind" : "Widget" , "metadata" : { "name" : "spaced" , "managedFields" : [ ] , "generation" : 7 } , "spec" : { "a" : [ 1 , 2.5e3 , -4 , true , false , null ] } } `,
	`{"metadata":{"name":"w2","deletionTimestamp":"2026-12-01T15:12:35Z","finalizers":["a\/b","c\u0064"],"annotations":{"k8s.io/initial-events-end":"true"}},"status":{"conditions":[{"message":"quote \" and \\ backslash"}]}}`,
	`{"metadata":{"name":"w3","deletionTimestamp":null,"finalizers":null,"generation":null,"uid":"u"}}`,
	`{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","message":"too old","reason":"Expired","code":410}`,
	`{"apiVersion":"test.example.com/v1","kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"10"}}`,
	`{"spec":{}}`,
	`[]`,
	`{"metadata":[]}`,
	`{"metadata":{"name":5}}`,
}

// escapedKeySeeds are objects whose metadata's keys are escaped, or
// repeated, as the API server never writes them but encoding/json reads
// them: an escaped key is its text, a repeated key's last value wins.
var escapedKeySeeds = []string{
	`{"kind":"Widget","metadata":{"na\u006de":"w4","namespac\u0065":"ns","resourceVersio\u006e":"7","ui\u0064":"u","generatio\u006e":3,"finalizer\u0073":["f"],"deletionTimestam\u0070":"2026-12-01T15:12:35Z"}}`,
	`{"kind":"Widget","metadata":{"name":"w5","managedField\u0073":[{"manager":"m"}]}}`,
	`{"kind":"Widget","metadata":{"managedFields":[{"manager":"a"}],"name":"w6","managedFields":[{"manager":"b"}]}}`,
	`{"kind":"Widget","metadata":{"managedFields":[],"managedFields":[],"name":"w7"}}`,
	`{"kind":"Widget","metadata":{"name":"w8","managedFields":[],"managedField\u0073":[]}}`,
	`{"kind":"Widget","metadata":{"managedFields":[],"managedFields":[]}}`,
	`{"kind":"Widget","metadata":{"name":"a","name":null,"finalizers":["x"],"finalizers":[],"generation":2,"generation":null,"uid":"u","uid":"v"}}`,
	`{"kind":"Widget","metadata":{"deletionTimestamp":"2026-12-01T15:12:35Z","deletionTimestamp":null,"finalizers":["x"],"finalizers":null}}`,
	`{"kin\u0064":"Widget","metadat\u0061":{"name":"w9"}}`,
	`{"kind":"Widget","metadata":{"name":"w10"},"metadata":{"name":"w11"}}`,
	`{"apiVersion":"v1","kind":"Statu\u0073","metadata":{},"status":"Failure"}`,
	`{"kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true","k8s.io/initial-events-end":"false"},"resourceVersion":"10"}}`,
	`{"kind":"Widget","metadata":{"annotations":{"k8s.io\/initial-events-end":"tru\u0065"},"annotation\u0073":{"k8s.io/initial-events-end":"true"}}}`,
}

// requireScannedAsDecoded checks that cachedFromJSON read b as client-go's
// unstructured decode and NewObject do, when both read it.
func requireScannedAsDecoded(t *testing.T, b []byte) {
	t.Helper()
	s, err := cachedFromJSON(b)
	if err != nil {
		require.ErrorIs(t, err, errNotScanned, "every error leaves the object to the decode")
		return
	}
	u := &unstructured.Unstructured{}
	if u.UnmarshalJSON(b) != nil {
		return
	}
	require.Equal(t, u.GetKind() == "Status" && u.GetAPIVersion() == "v1", s.status, "a Status is one")
	if s.status {
		return
	}
	want, err := NewObject(u)
	if err != nil {
		return
	}
	got := s.obj
	require.Equal(t, want.GetName(), got.GetName())
	require.Equal(t, want.GetNamespace(), got.GetNamespace())
	require.Equal(t, want.GetUID(), got.GetUID())
	require.Equal(t, want.GetResourceVersion(), got.GetResourceVersion())
	require.Equal(t, want.generation, got.generation)
	require.Equal(t, want.GetFinalizers(), got.GetFinalizers())
	require.Equal(t, want.GetDeletionTimestamp(), got.GetDeletionTimestamp())
	require.Equal(t, u.GetAnnotations()[initialEventsEnd] == "true", got.GetAnnotations() != nil, "the initial events' end")
	var wantRaw, gotRaw any
	require.NoError(t, json.Unmarshal([]byte(want.raw), &wantRaw))
	require.NoError(t, json.Unmarshal([]byte(got.raw), &gotRaw), "the cached JSON is JSON: %s", got.raw)
	require.Equal(t, wantRaw, gotRaw, "the cached JSON is the object's without its managed fields")
}

func TestCachedFromJSONReadsWhatTheDecodeAndNewCachedObjectRead(t *testing.T) {
	for _, seed := range scanSeeds {
		t.Run(seed, func(t *testing.T) { requireScannedAsDecoded(t, []byte(seed)) })
	}
}

// TestTheScanReadsEscapedAndRepeatedKeysAsEncodingJSONDoes shows the
// scan reading an escaped key as its text and a repeated key's last
// value, as client-go's decode does: before, "na\u006de" was no name (the
// object's key was "ns/"), "managedField\u0073" or a second managedFields
// was kept in the cache, and a name followed by a null name was kept.
func TestTheScanReadsEscapedAndRepeatedKeysAsEncodingJSONDoes(t *testing.T) {
	for _, seed := range escapedKeySeeds {
		t.Run(seed, func(t *testing.T) { requireScannedAsDecoded(t, []byte(seed)) })
	}
	s, err := cachedFromJSON([]byte(escapedKeySeeds[0]))
	require.NoError(t, err)
	require.Equal(t, "ns/w4", s.obj.Key())
	for _, seed := range escapedKeySeeds[1:6] {
		s, err := cachedFromJSON([]byte(seed))
		require.NoError(t, err)
		require.NotContains(t, s.obj.raw, "manage", "managed fields are cut: %s", seed)
	}
	_, _, v, err := versionFromJSON([]byte(`{"kind":"Widget","metadata":{"ui\u0064":"u1","resourceVersio\u006e":"8"}}`))
	require.NoError(t, err)
	require.Equal(t, Version{UID: "u1", ResourceVersion: "8"}, v)
}

func TestCachedFromJSONCutsTheManagedFieldsOutWhereverTheyAre(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"metadata":{"a":1,"managedFields":[{"x":"}"}],"b":2}}`, `{"metadata":{"a":1,"b":2}}`},
		{`{"metadata":{"managedFields":[],"b":2}}`, `{"metadata":{"b":2}}`},
		{`{"metadata":{"a":1,"managedFields":[]}}`, `{"metadata":{"a":1}}`},
		{`{"metadata":{"managedFields":[]}}`, `{"metadata":{}}`},
		{`{"metadata":{"a":1}}`, `{"metadata":{"a":1}}`},
	} {
		s, err := cachedFromJSON([]byte(tc.in))
		require.NoError(t, err)
		require.Equal(t, tc.want, s.obj.raw)
	}
}

func TestABookmarkKeepsTheAnnotationThatEndsTheInitialEvents(t *testing.T) {
	s, err := cachedFromJSON([]byte(`{"kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"10"}}`))
	require.NoError(t, err)
	require.Equal(t, map[string]string{metav1.InitialEventsAnnotationKey: "true"}, s.obj.GetAnnotations())
	require.Equal(t, "10", s.obj.GetResourceVersion())
	s, err = cachedFromJSON([]byte(`{"kind":"Widget","metadata":{"annotations":{"other":"true"},"resourceVersion":"11"}}`))
	require.NoError(t, err)
	require.Nil(t, s.obj.GetAnnotations())
}

func TestAWatchsStatusIsDecodedAsAStatus(t *testing.T) {
	obj, err := ObjectFromJSON([]byte(scanSeeds[7]))
	require.NoError(t, err)
	require.Equal(t, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Message: "too old", Reason: metav1.StatusReasonExpired, Code: 410}, obj)
}

func TestJSONTheScanDoesntReadIsDecodedAsTheDynamicClientDecodesIt(t *testing.T) {
	// A metadata that is no object: the scan refuses it, the decode
	// names the mistake.
	_, err := cachedFromJSON([]byte(`{"metadata":[]}`))
	require.True(t, errors.Is(err, errNotScanned))
	_, err = ObjectFromJSON([]byte(`{"metadata":[]}`))
	require.Error(t, err)
	// A generation that is no integer: the scan refuses it, and the
	// unstructured object's GetGeneration reads it as 0, as before.
	obj, err := ObjectFromJSON([]byte(`{"apiVersion":"test.example.com/v1","kind":"Widget","metadata":{"name":"w1","generation":"7"}}`))
	require.NoError(t, err)
	require.Equal(t, "w1", obj.(*Object).GetName())
	require.Zero(t, obj.(*Object).generation)
}

func TestAListIsReadItemByItem(t *testing.T) {
	l, err := listFromJSON([]byte(`{"apiVersion":"test.example.com/v1","items":[` + scanSeeds[0] + `,{"metadata":{"name":"w9","resourceVersion":"9"}}],"kind":"WidgetList","metadata":{"continue":"c","resourceVersion":"300"}}`))
	require.NoError(t, err)
	require.Equal(t, "300", l.ResourceVersion)
	require.Equal(t, "c", l.Continue)
	require.Len(t, l.Items, 2)
	require.Equal(t, "w1", l.Items[0].GetName())
	require.Equal(t, "9", l.Items[1].GetResourceVersion())
	l, err = listFromJSON([]byte(`{"items":null,"metadata":{"resourceVersion":"301"}}`))
	require.NoError(t, err)
	require.Empty(t, l.Items)
}

func FuzzCachedFromJSON(f *testing.F) {
	for _, seed := range append(scanSeeds, escapedKeySeeds...) {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			// The API server writes valid JSON; the scan may take
			// invalid JSON, which the reconcile's decode then refuses.
			_, _ = cachedFromJSON(b)
			return
		}
		requireScannedAsDecoded(t, b)
	})
}
