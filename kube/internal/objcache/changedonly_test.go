package objcache

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// obj is the Object whose JSON is raw as the resource's cache reads it,
// or an Object with no JSON when the cache can't read it.
func obj(t *testing.T, raw string) *Object {
	t.Helper()
	if o, err := ObjectFromJSON([]byte(raw)); err == nil {
		if c, ok := o.(*Object); ok {
			return c
		}
	}
	return &Object{}
}

func TestChangedOnly(t *testing.T) {
	base := `{"metadata":{"name":"w1","resourceVersion":"1","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`
	type writes struct {
		finalizer string
		status    []string
	}
	finalizer := writes{finalizer: "test/cleanup"}
	status := writes{status: []string{"seen"}}
	both := writes{finalizer: "test/cleanup", status: []string{"seen"}}
	for _, tc := range []struct {
		name  string
		new   string
		scope writes
		want  bool
	}{
		{"a status field the apply named", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":1,"phase":"Pending"}}`, status, true},
		{"a status field the apply didn't name", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Running"}}`, status, false},
		{"a status field added that the apply didn't name", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":1,"phase":"Pending","other":true}}`, status, false},
		{"the status, by a metadata apply (a Kind's status is its kubelet's)", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":1,"phase":"Pending"}}`, finalizer, false},
		{"the controller's finalizer", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep","test/cleanup"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, finalizer, true},
		{"its finalizer and its annotation", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep","test/cleanup"],"annotations":{"a":"b","test/cleanup":"not finalized"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, finalizer, true},
		{"another manager's finalizer", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep","third/keep"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, finalizer, false},
		{"another manager's finalizer removed", `{"metadata":{"name":"w1","resourceVersion":"2","annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, finalizer, false},
		{"a finalizer, by a status apply", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep","test/cleanup"],"annotations":{"a":"b"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, status, false},
		{"an annotation", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"c"}},"spec":{"size":1},"status":{"seen":0,"phase":"Pending"}}`, both, false},
		{"the spec", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size":2},"status":{"seen":0,"phase":"Pending"}}`, both, false},
		{"undecodable", `{`, both, false},
		// Fields are compared as their bytes, which NewObject's
		// encoding keeps alike for equal values; written otherwise, a
		// field counts as changed, and the key is queued.
		{"the spec written otherwise", `{"metadata":{"name":"w1","resourceVersion":"2","finalizers":["other/keep"],"annotations":{"a":"b"}},"spec":{"size": 1},"status":{"seen":0,"phase":"Pending"}}`, status, false},
		{"metadata's and status's fields in another order", `{"metadata":{"resourceVersion":"2","annotations":{"a":"b"},"name":"w1","finalizers":["other/keep"]},"spec":{"size":1},"status":{"phase":"Pending","seen":1}}`, status, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ChangedOnly(obj(t, base), obj(t, tc.new), tc.scope.finalizer, tc.scope.status))
		})
	}
	require.True(t, ChangedOnly(obj(t, `{"metadata":{"name":"w1","resourceVersion":"1"}}`), obj(t, `{"metadata":{"name":"w1","resourceVersion":"2"},"status":{"seen":1}}`), "", status.status),
		"a status the object had none of")
	require.Equal(t, []string{"seen", "phase"}, StatusFields([]byte(`{"apiVersion":"v1","metadata":{"name":"w1"},"status":{"seen":1,"phase":"x"}}`)))
}

// The ApplySet parent's apply sets its id label and its two annotations:
// those may change, added or to other values, and nothing else may.
func TestChangedOnlyMetadataLetsTheNamedLabelsAndAnnotationsDiffer(t *testing.T) {
	base := `{"metadata":{"name":"w1","resourceVersion":"1","labels":{"app":"x"},"annotations":{"a":"b"}},"spec":{"size":1}}`
	labels, annotations := []string{"set/id"}, []string{"set/tooling", "set/kinds"}
	for _, tc := range []struct {
		name, new string
		want      bool
	}{
		{"the named label and annotations added", `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"app":"x","set/id":"i"},"annotations":{"a":"b","set/tooling":"t","set/kinds":"k"}},"spec":{"size":1}}`, true},
		{"the named label and annotations in another order", `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"set/id":"i","app":"x"},"annotations":{"set/kinds":"k","a":"b"}},"spec":{"size":1}}`, true},
		{"another label", `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"app":"y","set/id":"i"},"annotations":{"a":"b"}},"spec":{"size":1}}`, false},
		{"a label removed", `{"metadata":{"name":"w1","resourceVersion":"2","annotations":{"a":"b"}},"spec":{"size":1}}`, false},
		{"another annotation", `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"app":"x"},"annotations":{"a":"c","set/kinds":"k"}},"spec":{"size":1}}`, false},
		{"the spec", `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"app":"x","set/id":"i"},"annotations":{"a":"b"}},"spec":{"size":2}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ChangedOnlyMetadata(obj(t, base), obj(t, tc.new), "", nil, labels, annotations))
		})
	}
	added := `{"metadata":{"name":"w1","resourceVersion":"2","labels":{"app":"x","set/id":"i"},"annotations":{"a":"b"}},"spec":{"size":1}}`
	require.False(t, ChangedOnly(obj(t, base), obj(t, added), "test/cleanup", []string{"seen"}), "ChangedOnly lets no label differ")
}
