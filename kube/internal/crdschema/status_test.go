package crdschema

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type (
	statusSpec struct {
		Size int32 `json:"size"`
	}
	readyStatus struct {
		Seen               int64              `json:"seen,omitempty"`
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	requiredStatus struct {
		Phase              string             `json:"phase"`
		ObservedGeneration int64              `json:"observedGeneration"`
		Conditions         []metav1.Condition `json:"conditions"`
	}
	statusObject[Status any] struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`

		Spec   statusSpec `json:"spec"`
		Status Status     `json:"status,omitempty"`
	}
)

// TestStatusFieldsNameWhatTheStatusLacks: the conditions and
// observedGeneration fields, of their types, and not through a pointer.
func TestStatusFieldsNameWhatTheStatusLacks(t *testing.T) {
	conditions, generation, err := StatusFields(reflect.TypeFor[readyStatus]())
	require.NoError(t, err)
	require.Equal(t, []int{2}, conditions)
	require.Equal(t, []int{1}, generation)

	_, _, err = StatusFields(reflect.TypeFor[statusSpec]())
	require.ErrorContains(t, err, "kube: StatusConventions: the Status type crdschema.statusSpec has no field encoded as conditions")
	require.ErrorContains(t, err, "the Status type crdschema.statusSpec has no field encoded as observedGeneration")

	type wrongTypes struct {
		Conditions         []string `json:"conditions"`
		ObservedGeneration string   `json:"observedGeneration"`
	}
	_, _, err = StatusFields(reflect.TypeFor[wrongTypes]())
	require.ErrorContains(t, err, "field conditions is []string, not []metav1.Condition")
	require.ErrorContains(t, err, "field observedGeneration is string, not int64")

	type viaPointer struct {
		*readyStatus
	}
	_, _, err = StatusFields(reflect.TypeFor[viaPointer]())
	require.ErrorContains(t, err, "field conditions is promoted through an embedded pointer")
	require.ErrorContains(t, err, "field observedGeneration is promoted through an embedded pointer")
}

// The CRD defaults the status to observedGeneration 0, behind every
// object's generation, until the controller writes it; a required field
// has its zero value.
func TestDefaultStatusIsTheZeroStatusAtObservedGenerationZero(t *testing.T) {
	for _, tc := range []struct {
		status reflect.Type
		object reflect.Type
		want   string
	}{
		{reflect.TypeFor[readyStatus](), reflect.TypeFor[statusObject[readyStatus]](), `{"observedGeneration":0}`},
		{reflect.TypeFor[requiredStatus](), reflect.TypeFor[statusObject[requiredStatus]](), `{"phase":"","observedGeneration":0}`},
	} {
		crd, err := CRD(Resource{
			Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: "Namespaced",
			Spec: reflect.TypeFor[statusSpec](), Status: tc.status, Object: tc.object,
		})
		require.NoError(t, err)
		require.NoError(t, DefaultStatus(crd, "v1", tc.status))
		st := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
		require.NotNil(t, st.Default)
		require.JSONEq(t, tc.want, string(st.Default.Raw))

		require.NoError(t, DefaultStatus(crd, "v2", tc.status), "another version's status is its conversion's")
	}
}
