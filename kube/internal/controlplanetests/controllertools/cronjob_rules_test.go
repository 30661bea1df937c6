package controllertools_test

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

// The values Rules names fields of; never written.
var (
	spec           CronJobSpec
	empiable       EmpiableObject
	hostsPattern   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	percentOrCount = regexp.MustCompile(`^((100|[0-9]{1,2})%|[0-9]+)$`)
)

// intOrString is an intstr.IntOrString of v, an int or a string.
func intOrString(v any) intstr.IntOrString {
	if i, ok := v.(int); ok {
		return intstr.FromInt32(int32(i))
	}
	return intstr.FromString(v.(string))
}

func intOrStrings(vs ...any) []intstr.IntOrString {
	out := make([]intstr.IntOrString, len(vs))
	for i, v := range vs {
		out[i] = intOrString(v)
	}
	return out
}

func intOrStringPtrs(vs ...any) []*intstr.IntOrString {
	out := make([]*intstr.IntOrString, len(vs))
	for i, v := range vs {
		x := intOrString(v)
		out[i] = &x
	}
	return out
}

// CronJob is controller-tools' CronJob, each of its markers written as a
// kube rule. The comment before a rule gives the marker it replaces.
var CronJob = kube.Resource[CronJobSpec, CronJobStatus]{
	Group:    "testdata.kubebuilder.io", // +groupName
	Version:  "v1",                      // +versionName
	Kind:     "CronJob",
	Plural:   "cronjobs",
	Singular: "mycronjob", // +kubebuilder:resource:singular=mycronjob
	Scope:    kube.Namespaced,
	Rules: []kube.TypeRules{
		kube.Rules(&spec,
			// +nullable
			kube.Field(&spec.CanBeNull).Nullable(),
			// +kubebuilder:validation:MinLength=4
			kube.Field(&spec.TwoOfAKindPart0).MinLength(4),
			// +kubebuilder:default=forty-two
			// +kubebuilder:example=forty-two, +kubebuilder:title=DefaultedString
			kube.Field(&spec.DefaultedString).Default("forty-two").Example("forty-two").Title("DefaultedString"),
			// +kubebuilder:default={a,b}
			// +kubebuilder:example={a,b}, +kubebuilder:title=DefaultedSlice
			kube.Field(&spec.DefaultedSlice).Default([]string{"a", "b"}).Example([]string{"a", "b"}).Title("DefaultedSlice"),
			// +kubebuilder:default={{nested: {foo: "baz", bar: true}},{nested: {foo: "qux", bar: false}}}
			// +kubebuilder:example=(the same), +kubebuilder:title="124"
			kube.Field(&spec.DefaultedObject).
				Default([]RootObject{{Nested: NestedObject{Foo: "baz", Bar: true}}, {Nested: NestedObject{Foo: "qux", Bar: false}}}).
				Example([]RootObject{{Nested: NestedObject{Foo: "baz", Bar: true}}, {Nested: NestedObject{Foo: "qux", Bar: false}}}).
				Title("124"),
			// +kubebuilder:default={}
			kube.Field(&spec.DefaultedEmptySlice).Default([]string{}).Title("{}"), // and +kubebuilder:title="{}"
			kube.Field(&spec.DefaultedEmptyMap).Default(map[string]string{}),
			kube.Field(&spec.DefaultedEmptyObject).Default(EmpiableObject{}),
			// +kubebuilder:default="kubebuilder-default" wins over +default="kubernetes-default"
			kube.Field(&spec.DoubleDefaultedString).Default("kubebuilder-default"),
			// +default=...
			kube.Field(&spec.KubernetesDefaultedString).Default("forty-two"),
			kube.Field(&spec.KubernetesDefaultedSlice).Default([]string{"a", "b"}),
			kube.Field(&spec.KubernetesDefaultedObject).Default([]RootObject{{Nested: NestedObject{Foo: "baz", Bar: true}}, {Nested: NestedObject{Foo: "qux", Bar: false}}}),
			kube.Field(&spec.KubernetesDefaultedEmptySlice).Default([]string{}),
			kube.Field(&spec.KubernetesDefaultedEmptyMap).Default(map[string]string{}),
			kube.Field(&spec.KubernetesDefaultedEmptyObject).Default(EmpiableObject{}),
			// +kubebuilder:validation:Pattern=...
			kube.Field(&spec.PatternObject).Pattern(regexp.MustCompile(`^$|^((https):\/\/?)[^\s()<>]+(?:\([\w\d]+\)|([^[:punct:]\s]|\/?))$`)),
			// +kubebuilder:validation:EmbeddedResource
			kube.Field(&spec.EmbeddedResource).EmbeddedResource(),
			// +kubebuilder:pruning:PreserveUnknownFields
			kube.Field(&spec.UnprunedJSON).PreserveUnknownFields(),
			// +kubebuilder:pruning:PreserveUnknownFields, +kubebuilder:validation:EmbeddedResource
			kube.Field(&spec.UnprunedEmbeddedResource).PreserveUnknownFields().EmbeddedResource(),
			kube.Field(&spec.UnprunedFromTypeAndField).PreserveUnknownFields(),
			// +listType=map, +listMapKey=name, +listMapKey=secondary
			kube.Field(&spec.AssociativeList).ListMap("name", "secondary"),
			// +k8s:listType=map, +k8s:listMapKey=name
			kube.Field(&spec.K8sAssociativeList).ListMap("name"),
			// +k8s:listType=set
			kube.Field(&spec.K8sSetList).ListSet(),
			// +k8s:listType=atomic
			kube.Field(&spec.K8sAtomicList).Atomic(),
			// +structType=atomic
			kube.Field(&spec.StructWithSeveralFields).Atomic(),
			kube.Field(&spec.NestedStructWithSeveralFieldsDoubleMarked).Atomic(),
			// +kubebuilder:validation:Optional, +optional, +k8s:optional
			kube.Field(&spec.ExplicitlyOptionalKubebuilder).Optional(),
			kube.Field(&spec.ExplicitlyOptionalKubernetes).Optional(),
			kube.Field(&spec.ExplicitlyOptionalK8s).Optional(),
			// +kubebuilder:validation:Required, +required, +k8s:required
			kube.Field(&spec.ExplicitlyRequiredKubebuilder).Required(),
			kube.Field(&spec.ExplicitlyRequiredKubernetes).Required(),
			kube.Field(&spec.ExplicitlyRequiredK8s).Required(),
			// +kubebuilder:validation:XIntOrString, MaxLength=11, MinLength=2, Pattern=...
			kube.Field(&spec.IntOrStringWithAPattern).MaxLength(11).MinLength(2).Pattern(percentOrCount),
			// +kubebuilder:validation:XIntOrString, Enum=1;2;"foo";"bar"
			kube.Field(&spec.IntOrStringWithEnum).Enum(intOrStringPtrs(1, 2, "foo", "bar")...),
			// +kubebuilder:validation:Minimum=-0.5, Maximum=1.5, MultipleOf=0.5
			kube.Field(&spec.FloatWithValidations).Minimum(-0.5).Maximum(1.5).MultipleOf(0.5),
			kube.Field(&spec.Float64WithValidations).Minimum(-0.5).Maximum(1.5).MultipleOf(0.5),
			// +kubebuilder:validation:Minimum=-2, Maximum=2, MultipleOf=2
			kube.Field(&spec.IntWithValidations).Minimum(-2).Maximum(2).MultipleOf(2),
			kube.Field(&spec.Int32WithValidations).Minimum(-2).Maximum(2).MultipleOf(2),
			// +kubebuilder:validation:XValidation:rule="self.size() % 2 == 0",message="must have even length"
			// +kubebuilder:validation:XValidation:rule="true"
			kube.Field(&spec.StringWithEvenLength).
				Validation("self.size() % 2 == 0", "must have even length").
				XValidation(kube.CEL{Rule: "true"}),
			// +kubebuilder:validation:XValidation:rule=...,messageExpression=...
			kube.Field(&spec.StringWithEvenLengthAndMessageExpression).
				XValidation(kube.CEL{Rule: "self.size() % 2 == 0", MessageExpression: "self + ' has odd length, must be even'"}),
			// +kubebuilder:validation:XValidation:rule="self.startsWith('good-')",message="must have good prefix"
			kube.Field(&spec.StringWithEvenLengthAndGoodPrefix).Validation("self.startsWith('good-')", "must have good prefix"),
			// +kubebuilder:validation:MinItems=1, items:MinLength=1, items:MaxLength=255, items:Pattern=..., +listType=set
			kube.Items(kube.Field(&spec.Hosts).MinItems(1).ListSet(), kube.Values[string]().MinLength(1).MaxLength(255).Pattern(hostsPattern)),
			// +kubebuilder:validation:items:Enum=0;1;3
			kube.Items(kube.Field(&spec.EnumSlice), kube.Values[int]().Enum(0, 1, 3)),
			// +kubebuilder:validation:MinLength=1, MaxLength=255
			kube.Field(&spec.StringAliasAddedValidation).MinLength(1).MaxLength(255),
			// StringAliasWithValidation's MinLength=1, MaxLength=255: an alias of string is string in Go
			kube.Field(&spec.StringAliasAlreadyValidated).MinLength(1).MaxLength(255),
			// +kubebuilder:validation:MinItems=2, MaxItems=2
			kube.Field(&spec.StringPair).MinItems(2).MaxItems(2),
			// +kubebuilder:validation:MinItems=3
			kube.Field(&spec.LongerStringArray).MinItems(3),
			// +kubebuilder:validation:items:XIntOrString, items:MaxLength=10, items:MinLength=1, items:Pattern=...
			kube.Items(kube.Field(&spec.IntOrStringArrayWithAPattern), kube.Values[*intstr.IntOrString]().MaxLength(10).MinLength(1).Pattern(percentOrCount)),
			// +kubebuilder:validation:items:XIntOrString, items:MaxLength=3, items:MinLength=1, items:Enum=1;2;"foo";"bar"
			kube.Items(kube.Field(&spec.IntOrStringWithEnumSlice), kube.Values[intstr.IntOrString]().MaxLength(3).MinLength(1).Enum(intOrStrings(1, 2, "foo", "bar")...)),
			// +optional, +default="TCP"
			kube.Field(&spec.Protocol).Optional().Default(corev1.ProtocolTCP),
			// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || self == 0",message=...,optionalOldSelf=true
			kube.Field(&spec.OnlyAllowSettingOnUpdate).XValidation(kube.CEL{
				Rule: "oldSelf.hasValue() || self == 0", Message: "must be set to 0 on creation. can be set to any value on an update.", OptionalOldSelf: true,
			}),
			// +kubebuilder:validation:Minimum=1, Maximum=10
			kube.Field(&spec.LocallyBoundedInteger).Minimum(1).Maximum(10),
			// +kubebuilder:validation:MinLength=1, MaxLength=10
			kube.Field(&spec.LocallyBoundedString).MinLength(1).MaxLength(10),
			// +kubebuilder:validation:MinLength=10, MaxLength=10
			kube.Field(&spec.FieldLevelAliasOverride).MinLength(10).MaxLength(10),
			kube.Field(&spec.FieldLevelLocalDeclarationOverride).MinLength(10).MaxLength(10),
			// +kubebuilder:title="title on field"
			kube.Field(&spec.StringAliasWithAddedTitle).Title("title on field"),
			// MinMaxObject's +kubebuilder:validation:MinProperties=1, MaxProperties=2, where it appears
			kube.Field(&spec.MinMaxProperties).MinProperties(1).MaxProperties(2),
			// NestedStructWithSeveralFields' +structType=atomic, where it appears
			kube.Field(&spec.NestedStructWithSeveralFields).Atomic(),
			// NestedAssociativeList's and K8sNestedAssociativeList's +listType=map, +listMapKey=name, +listMapKey=secondary
			kube.Field(&spec.NestedAssociativeList).ListMap("name", "secondary"),
			kube.Field(&spec.K8sNestedAssociativeList).ListMap("name", "secondary"),
			// Hosts' items:MinLength=1, items:MaxLength=255, items:Pattern=..., +listType=set, where it appears
			kube.Items(kube.Field(&spec.HostsAlias).ListSet(), kube.Values[string]().MinLength(1).MaxLength(255).Pattern(hostsPattern)),
		).XValidation(kube.CEL{ // the +kubebuilder:validation:XValidation on CronJobSpec
			Rule:      "has(oldSelf.forbiddenInt) || !has(self.forbiddenInt)",
			Message:   "forbiddenInt is not allowed",
			FieldPath: ".forbiddenInt",
			Reason:    apiextensionsv1.FieldValueForbidden,
		}),
		// +kubebuilder:default=forty-two on EmpiableObject.Foo
		kube.Rules(&empiable, kube.Field(&empiable.Foo).Default("forty-two")),
		// +kubebuilder:validation:Enum=Allow;Forbid;Replace
		kube.ValueRules(kube.Values[ConcurrencyPolicy]().Enum("Allow", "Forbid", "Replace")),
		// +k8s:enum, with the type's constants
		kube.ValueRules(kube.Values[K8sConcurrencyPolicy]().Enum("Allow", "Forbid", "Replace")),
		// +kubebuilder:validation:MinLength=4
		kube.ValueRules(kube.Values[LongerString]().MinLength(4)),
		// +kubebuilder:validation:XValidation:rule="self.size() % 2 == 0",message="must have even length"
		kube.ValueRules(kube.Values[StringEvenType]().Validation("self.size() % 2 == 0", "must have even length")),
		// +kubebuilder:validation:MinItems=1, items:MinLength=1, items:MaxLength=255, items:Pattern=...
		kube.ValueRules(kube.Values[Hosts]().MinItems(1)),
		// +kubebuilder:validation:Type=string
		kube.Schema[TotallyABool](apiextensionsv1.JSONSchemaProps{Type: "string"}),
		kube.Schema[URL](apiextensionsv1.JSONSchemaProps{Type: "string"}),
		kube.Schema[URL2](apiextensionsv1.JSONSchemaProps{Type: "string"}),
		// +kubebuilder:validation:Type=integer, Format=int64
		kube.Schema[Time2](apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}),
		// Duration encodes itself as its fields
		kube.Schema[Duration](apiextensionsv1.JSONSchemaProps{
			Type:       "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"value": {Type: "integer", Format: "int64"}},
			Required:   []string{"value"},
		}),
		// +kubebuilder:validation:Type=object, +kubebuilder:pruning:PreserveUnknownFields
		kube.Schema[Preserved](apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}),
	},
}

func ptr[T any](v T) *T { return &v }
