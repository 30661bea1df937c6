package kube_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/z5labs/humus/kube"
)

type rootSpec struct {
	Schedule string `json:"schedule"`
}

var rootObject kube.Object[rootSpec, struct{}]

func rootResource(rules ...kube.TypeRules) kube.Resource[rootSpec, struct{}] {
	return kube.Resource[rootSpec, struct{}]{
		Group: "batch.example.com", Version: "v1", Kind: "CronJob", Plural: "cronjobs", Scope: kube.Namespaced,
		Rules: rules,
	}
}

// TestRulesOfTheObjectAreTheRootsCELRules: a CEL rule on the whole object,
// such as the kubebuilder book's limit on a CronJob's name, is an
// x-kubernetes-validations entry of the schema's root, where self is the
// object.
func TestRulesOfTheObjectAreTheRootsCELRules(t *testing.T) {
	crd, err := rootResource(
		kube.Rules(&rootObject).
			Validation("self.metadata.name.size() <= 52", "a CronJob's name must be no more than 52 characters").
			XValidation(kube.CEL{Rule: "self.spec.schedule != ''", Reason: apiextensionsv1.FieldValueRequired, FieldPath: ".spec.schedule"}),
	).CRD()
	require.NoError(t, err)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	require.Len(t, root.XValidations, 2)
	require.Equal(t, "self.metadata.name.size() <= 52", root.XValidations[0].Rule)
	require.Equal(t, "a CronJob's name must be no more than 52 characters", root.XValidations[0].Message)
	require.Equal(t, ".spec.schedule", root.XValidations[1].FieldPath)
	require.Empty(t, crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].XValidations)
}

// TestTheObjectTakesOnlyCELRules: a Field rule or a Description on the
// object itself is an error that says what the root takes.
func TestTheObjectTakesOnlyCELRules(t *testing.T) {
	_, err := rootResource(
		kube.Rules(&rootObject, kube.Field(&rootObject.Spec).Description("the spec")).Description("a CronJob"),
	).CRD()
	require.ErrorContains(t, err, "the object itself takes only Validation and XValidation")
	require.ErrorContains(t, err, "not Field rules and a Description (give Resource.Description)")
}

// TestAnnotationsAndLabelsAreTheCRDsOwn: Resource.Annotations and Labels
// are the CRD object's metadata, checked as the API server checks an
// object's; an api-approved.kubernetes.io annotation lets a group under
// k8s.io be used.
func TestAnnotationsAndLabelsAreTheCRDsOwn(t *testing.T) {
	r := rootResource()
	r.Annotations = map[string]string{"cert-manager.io/inject-ca-from": "default/webhook-cert"}
	r.Labels = map[string]string{"app.kubernetes.io/part-of": "cronjobs"}
	crd, err := r.CRD()
	require.NoError(t, err)
	require.Equal(t, r.Annotations, crd.Annotations)
	require.Equal(t, r.Labels, crd.Labels)
	r.Annotations["cert-manager.io/inject-ca-from"] = "changed"
	require.Equal(t, "default/webhook-cert", crd.Annotations["cert-manager.io/inject-ca-from"], "the CRD holds a copy")

	r = rootResource()
	r.Group = "batch.x-k8s.io"
	_, err = r.CRD()
	require.NoError(t, err, "x-k8s.io isn't k8s.io")
	r.Group = "batch.k8s.io"
	_, err = r.CRD()
	require.ErrorContains(t, err, "only with an api-approved.kubernetes.io annotation in Resource.Annotations")
	r.Annotations = map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"}
	_, err = r.CRD()
	require.NoError(t, err)

	r = rootResource()
	r.Annotations = map[string]string{"not a key": "v"}
	r.Labels = map[string]string{"app": "not a value!"}
	_, err = r.CRD()
	require.ErrorContains(t, err, `kube: Resource.Annotations: Invalid value: "not a key"`)
	require.ErrorContains(t, err, `kube: Resource.Labels: Invalid value: "not a value!"`)
}

type templated struct {
	Template corev1.PodTemplateSpec `json:"template"`
}

// TestEmbeddedObjectMetaIsTyped: with EmbeddedObjectMeta, a template's
// metadata has controller-gen's five properties, so a CEL rule may read
// them; without it, it keeps any field.
func TestEmbeddedObjectMetaIsTyped(t *testing.T) {
	r := kube.Resource[templated, struct{}]{
		Group: "jobs.example.com", Version: "v1", Kind: "Templated", Plural: "templateds", Scope: kube.Namespaced,
	}
	crd, err := r.CRD()
	require.NoError(t, err)
	meta := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["template"].Properties["metadata"]
	require.True(t, *meta.XPreserveUnknownFields)
	require.Empty(t, meta.Properties)

	r.EmbeddedObjectMeta = true
	crd, err = r.CRD()
	require.NoError(t, err)
	meta = crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["template"].Properties["metadata"]
	require.Nil(t, meta.XPreserveUnknownFields)
	require.ElementsMatch(t, []string{"name", "namespace", "labels", "annotations", "finalizers"}, slices.Collect(maps.Keys(meta.Properties)))
	require.Equal(t, "string", meta.Properties["labels"].AdditionalProperties.Schema.Type)
	require.Equal(t, "string", meta.Properties["finalizers"].Items.Schema.Type)
	require.NotEmpty(t, meta.Properties["namespace"].Description)
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["metadata"]
	require.Empty(t, root.Properties, "the root's metadata is the API server's")
}

// TestAFieldPathTheAPIServerRefusesIsAnError: the API server refuses a CRD
// whose rule's fieldPath names no field of the schema the rule is on
// ("must be a valid path"), and a root rule's .metadata.name is such a
// path: the CRD's schema of metadata is a bare object (issue 37). CRD
// refuses it too, naming the rule, where it is and why; the paths the
// server accepts pass.
func TestAFieldPathTheAPIServerRefusesIsAnError(t *testing.T) {
	_, err := rootResource(
		kube.Rules(&rootObject).
			XValidation(kube.CEL{Rule: "self.metadata.name.size() <= 52", FieldPath: ".metadata.name"}).
			XValidation(kube.CEL{Rule: "self.spec.schedule != ''", FieldPath: ".spec.when"}).
			XValidation(kube.CEL{Rule: "true", FieldPath: ".spec.schedule[0]"}),
		kube.Rules(&rootObject.Spec, kube.Field(&rootObject.Spec.Schedule).XValidation(kube.CEL{Rule: "self != ''", FieldPath: ".size"})),
	).CRD()
	require.ErrorContains(t, err, `the CEL rule "self.metadata.name.size() <= 52" on the object has FieldPath ".metadata.name", which the API server refuses: .metadata has no fields in its schema, so "name" names nothing`)
	require.ErrorContains(t, err, `the CEL rule "self.spec.schedule != ''" on the object has FieldPath ".spec.when", which the API server refuses: .spec has no field "when"`)
	require.ErrorContains(t, err, `FieldPath ".spec.schedule[0]", which the API server refuses: "[0]" after ".spec.schedule" is a list index`)
	require.ErrorContains(t, err, `the CEL rule "self != ''" on .spec.schedule has FieldPath ".size", which the API server refuses: self has no fields in its schema`)

	for _, path := range []string{".spec", ".spec.schedule", "['spec'].schedule", ".metadata", ".kind", ".status"} {
		_, err := rootResource(kube.Rules(&rootObject).XValidation(kube.CEL{Rule: "true", FieldPath: path})).CRD()
		require.NoError(t, err, "FieldPath %q", path)
	}
	_, err = rootResource(kube.Rules(&rootObject).XValidation(kube.CEL{Rule: "true", FieldPath: " "})).CRD()
	require.ErrorContains(t, err, "it must be non-empty if given")
}
