package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
