package kube_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

// The resources of issue 27's additions: a CEL rule on the whole object
// (and the CRD's own annotations and labels), and a status of
// metav1.Conditions with their Go source's validations.

type nameLimitedSpec struct {
	Schedule string `json:"schedule"`
}

var nameLimitedObject kube.Object[nameLimitedSpec, struct{}]

// nameLimited is the kubebuilder book's CronJob limit on its name, which
// the book checks in a webhook, as a CEL rule on the whole object.
var nameLimited = kube.Resource[nameLimitedSpec, struct{}]{
	Group: "root.example.com", Version: "v1", Kind: "NameLimited", Plural: "namelimiteds", Scope: kube.Namespaced,
	Annotations: map[string]string{"cert-manager.io/inject-ca-from": "default/webhook-cert"},
	Labels:      map[string]string{"app.kubernetes.io/part-of": "examples"},
	Rules: []kube.TypeRules{
		kube.Rules(&nameLimitedObject).Validation("self.metadata.name.size() <= 52", "the name must be no more than 52 characters"),
	},
}

type conditionedStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

var conditionedStatusV conditionedStatus

var conditioned = kube.Resource[struct{}, conditionedStatus]{
	Group: "conditions.example.com", Version: "v1", Kind: "Conditioned", Plural: "conditioneds", Scope: kube.Namespaced,
	Rules: []kube.TypeRules{
		kube.Rules(&conditionedStatusV, kube.Field(&conditionedStatusV.Conditions).ListMap("type")),
	},
}

type activeStatus struct {
	Active []corev1.ObjectReference `json:"active,omitempty"`
	Count  intstr.IntOrString       `json:"count,omitzero"`
}

var (
	activeObject kube.Object[struct{}, activeStatus]
	activeRef    corev1.ObjectReference
)

// withActive has a column of a list's items, one of an explicit type and
// priority.
var withActive = kube.Resource[struct{}, activeStatus]{
	Group: "columns2.example.com", Version: "v1", Kind: "WithActive", Plural: "withactives", Scope: kube.Namespaced,
	Columns: kube.Columns(&activeObject,
		kube.ItemsColumn("Active", &activeObject.Status.Active, &activeRef, &activeRef.Name),
		kube.PrinterColumn("Count", &activeObject.Status.Count).Type("integer"),
		kube.PrinterColumn("Kinds", &activeObject.Status.Active).Priority(1),
	),
}

type colorSpec struct {
	Color string `json:"color"`
	Size  int32  `json:"size"`
}

var colorObject kube.Object[colorSpec, struct{}]

// colored has selectable fields, named by field pointers.
var colored = kube.Resource[colorSpec, struct{}]{
	Group: "selectable.example.com", Version: "v1", Kind: "Colored", Plural: "coloreds", Scope: kube.Namespaced,
	SelectableFields: kube.SelectableFields(&colorObject, kube.Field(&colorObject.Spec.Color), kube.Field(&colorObject.Spec.Size)),
}

type jobTemplateSpec struct {
	Template corev1.PodTemplateSpec `json:"template"`
}

var podTemplate corev1.PodTemplateSpec

// namespacedTemplates' template must be for the namespace jobs, a CEL rule
// that reads the template's metadata, which only EmbeddedObjectMeta lets
// compile.
func namespacedTemplates(embedded bool) kube.Resource[jobTemplateSpec, struct{}] {
	return kube.Resource[jobTemplateSpec, struct{}]{
		Group: "embedded.example.com", Version: "v1", Kind: "Namespaced", Plural: "namespaceds", Scope: kube.Namespaced,
		EmbeddedObjectMeta: embedded,
		Rules: []kube.TypeRules{
			kube.Rules(&podTemplate).Validation("!has(self.metadata.namespace) || self.metadata.namespace == 'jobs'", "the template's namespace must be jobs"),
		},
	}
}

// Hosts is a named slice type: a set of hostnames, wherever it appears.
type Hosts []string

type hostsSpec struct {
	Primary Hosts `json:"primary"`
	Backup  Hosts `json:"backup,omitempty"`
}

var hosted = kube.Resource[hostsSpec, struct{}]{
	Group: "hosts.example.com", Version: "v1", Kind: "Hosted", Plural: "hosteds", Scope: kube.Namespaced,
	Rules: []kube.TypeRules{
		kube.ValueRules(kube.ItemsOf(kube.Values[Hosts]().ListSet(), kube.Values[string]().Format(kube.FormatHostname))),
	},
}

// TestTheNewRulesCRDsPassTheAPIServersValidation: the CRDs of a root CEL
// rule and of Conditions pass apiextensions' ValidateCustomResourceDefinition,
// which compiles the CEL rule against the root's schema.
func TestTheNewRulesCRDsPassTheAPIServersValidation(t *testing.T) {
	c, err := nameLimited.CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = conditioned.CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = withActive.CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = colored.CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = hosted.CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = namespacedTemplates(true).CRD()
	require.NoError(t, err)
	requireServerValid(t, c)
	c, err = namespacedTemplates(false).CRD()
	require.NoError(t, err)
	require.NotEmpty(t, serverErrors(t, c), "without EmbeddedObjectMeta, a rule can't read a template's metadata")
}
