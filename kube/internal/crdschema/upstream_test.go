package crdschema

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type templateSpec struct {
	Template corev1.PodTemplateSpec `json:"template"`
}

type templateObject struct {
	Spec   templateSpec `json:"spec"`
	Status struct{}     `json:"status,omitempty"`
}

// crdOf is the CRD of a resource whose spec is a Spec and status empty.
func crdOf[Spec any](t *testing.T, rules ...Rules) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := CRD(Resource{
		Group: "test.example.com", Version: "v1", Kind: "Widget", Plural: "widgets", Scope: "Namespaced",
		Rules: rules, Spec: reflect.TypeFor[Spec](), Status: reflect.TypeFor[struct{}](), Object: reflect.TypeFor[templateObject](),
	})
	require.NoError(t, err)
	return crd
}

// at is the schema at path, property names and "items", below s.
func at(t *testing.T, s apiextensionsv1.JSONSchemaProps, path ...string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for _, p := range path {
		if p == "items" {
			require.NotNil(t, s.Items, "no items at %s", p)
			s = *s.Items.Schema
			continue
		}
		next, ok := s.Properties[p]
		require.True(t, ok, "no property %s in %v", p, path)
		s = next
	}
	return s
}

// TestAnUpstreamDefaultedFieldIsntNullable: a field of Kubernetes' own
// types with a +default, such as GRPCAction's service (a *string, default
// ""), isn't nullable, as a field with a user's Default isn't: a null
// there would be stored as null where a Pod stores "".
func TestAnUpstreamDefaultedFieldIsntNullable(t *testing.T) {
	crd := crdOf[templateSpec](t)
	spec := at(t, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec")
	service := at(t, spec, "template", "spec", "containers", "items", "livenessProbe", "grpc", "service")
	require.NotNil(t, service.Default)
	require.JSONEq(t, `""`, string(service.Default.Raw))
	require.False(t, service.Nullable, "a defaulted field isn't nullable")
}

// TestUpstreamEnumsAreLeftOut: the enums of Kubernetes' own types, which
// the API server's OpenAPI schema carries and controller-gen leaves out,
// are left out, so a CRD made against one release doesn't refuse a value a
// newer cluster's Pods accept; the Pod's own validation still checks them.
// What else the table says is kept.
func TestUpstreamEnumsAreLeftOut(t *testing.T) {
	crd := crdOf[templateSpec](t)
	spec := at(t, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec")
	var enums []string
	var walk func(path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s apiextensionsv1.JSONSchemaProps) {
		if len(s.Enum) > 0 {
			enums = append(enums, path)
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[*]", *s.Items.Schema)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(path+"{*}", *s.AdditionalProperties.Schema)
		}
	}
	walk(".spec", spec)
	require.Empty(t, enums)

	podSpec := at(t, spec, "template", "spec")
	require.Equal(t, "string", at(t, podSpec, "restartPolicy").Type)
	containers := at(t, podSpec, "containers")
	require.Equal(t, "map", *containers.XListType, "list types are kept")
	require.Equal(t, []string{"name"}, containers.XListMapKeys)
	require.Contains(t, at(t, containers, "items").Required, "name", "required fields are kept")
	require.NotEmpty(t, at(t, containers, "items", "resources", "limits").AdditionalProperties.Schema.Pattern, "Quantity's pattern is kept")
}

type conditionsStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TestAConditionHasItsGoSourcesValidations: metav1.Condition's fields have
// the validations its Go source's +kubebuilder markers give and
// controller-gen emits, which the API server's OpenAPI schema lacks.
func TestAConditionHasItsGoSourcesValidations(t *testing.T) {
	crd := crdOf[conditionsStatus](t)
	item := at(t, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec", "conditions", "items")
	require.ElementsMatch(t, []string{"type", "status", "lastTransitionTime", "reason", "message"}, item.Required)
	status := at(t, item, "status")
	require.Len(t, status.Enum, 3)
	require.JSONEq(t, `"Unknown"`, string(status.Enum[2].Raw))
	reason := at(t, item, "reason")
	require.Equal(t, int64(1), *reason.MinLength)
	require.Equal(t, int64(1024), *reason.MaxLength)
	require.Equal(t, `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, reason.Pattern)
	typ := at(t, item, "type")
	require.Equal(t, int64(316), *typ.MaxLength)
	require.Equal(t, qualifiedNamePattern, typ.Pattern)
	require.Equal(t, int64(32768), *at(t, item, "message").MaxLength)
	og := at(t, item, "observedGeneration")
	require.Equal(t, float64(0), *og.Minimum)
	require.False(t, og.Nullable)
	require.Empty(t, consistent(&item), "the markers leave values")
}
