package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube"
)

type colorSpec struct {
	Color  string            `json:"color"`
	Size   int32             `json:"size"`
	Ready  bool              `json:"ready"`
	Tags   []string          `json:"tags,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Ptr    *struct {
		Name string `json:"name"`
	} `json:"ptr,omitempty"`
}

var colorObject kube.Object[colorSpec, struct{}]

func colorResource(fields ...kube.SelectableField) kube.Resource[colorSpec, struct{}] {
	return kube.Resource[colorSpec, struct{}]{
		Group: "colors.example.com", Version: "v1", Kind: "Color", Plural: "colors", Scope: kube.Namespaced,
		SelectableFields: fields,
	}
}

// TestSelectableFieldsAreNamedByFieldPointers: each selectable field is
// the JSONPath of a field named by its pointer, as a column is.
func TestSelectableFieldsAreNamedByFieldPointers(t *testing.T) {
	crd, err := colorResource(kube.SelectableFields(&colorObject,
		kube.Field(&colorObject.Spec.Color), kube.Field(&colorObject.Spec.Size), kube.Field(&colorObject.Spec.Ready),
	)...).CRD()
	require.NoError(t, err)
	require.Equal(t, []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}, {JSONPath: ".spec.size"}, {JSONPath: ".spec.ready"}},
		crd.Spec.Versions[0].SelectableFields)
}

// TestSelectableFieldErrors: what the API server would refuse, and what
// names no field, is one error from CRD.
func TestSelectableFieldErrors(t *testing.T) {
	var other kube.Object[colorSpec, struct{}]
	fields := kube.SelectableFields(&colorObject,
		kube.Field(&colorObject.Spec.Tags),
		kube.Field(&colorObject.Name),
		kube.Field(&colorObject.Spec.Color),
		kube.Field(&colorObject.Spec.Color),
		kube.Field(&other.Spec.Size),
		kube.Field(&colorObject.Spec.Size).Minimum(1),
		nil,
	)
	otherType := struct {
		A string `json:"a"`
	}{}
	fields = append(fields, kube.SelectableFields(&otherType, kube.Field(&otherType.A))...)
	fields = append(fields, kube.SelectableField{})
	_, err := colorResource(fields...).CRD()
	for _, want := range []string{
		"SelectableFields[0] .spec.tags is array: the API server selects by a string, an integer or a boolean only",
		"SelectableFields[1] .metadata.name: the API server selects by metadata.name and metadata.namespace itself",
		"SelectableFields[3] .spec.color is given twice",
		"SelectableFields[4] (a int32) isn't a field encoding/json encodes in the value given to SelectableFields",
		"SelectableFields[5] (a int32) has constraints, which belong in the Rules of its type",
		"SelectableFields[6] is nil",
		"SelectableFields[7] .a names a field of a struct",
		"Resource.SelectableFields[8] is a zero SelectableField",
	} {
		require.ErrorContains(t, err, want)
	}

}
