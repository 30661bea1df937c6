package kube_test

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

// Phase and Port are named scalars, constrained wherever they appear by
// ValueRules.
type (
	Phase string
	Port  int32
)

// keyText is a map key that encodes itself with a value-receiver
// MarshalText.
type keyText struct{ a, b string }

func (k keyText) MarshalText() ([]byte, error) { return []byte(k.a + "/" + k.b), nil }

// Bounds is a struct with a CEL rule of its own, with every option.
type Bounds struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// MyCondition is a user's own condition type, by the API conventions.
type MyCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	Reason             string      `json:"reason,omitempty"`
}

// ConstraintsSpec has a field for each kind of constraint: one CRD shows
// them all on the API server.
type ConstraintsSpec struct {
	Ratio     float64                `json:"ratio"`
	Step      int32                  `json:"step"`
	ID        string                 `json:"id"`
	Labels    map[string]string      `json:"labels"`
	Args      []string               `json:"args,omitempty"`
	Env       map[string]string      `json:"env,omitempty"`
	Window    Bounds                 `json:"window"`
	Extra     map[string]any         `json:"extra,omitempty"`
	Blob      json.RawMessage        `json:"blob,omitempty"`
	Any       any                    `json:"any,omitempty"`
	Embedded  runtime.RawExtension   `json:"embedded,omitzero"`
	Opt       string                 `json:"opt"`
	Req       *string                `json:"req,omitempty"`
	Hosts     []string               `json:"hosts,omitempty"`
	Ports     map[string]int32       `json:"ports,omitempty"`
	Phase     Phase                  `json:"phase,omitempty"`
	Phases    []Phase                `json:"phases,omitempty"`
	Port      Port                   `json:"port,omitempty"`
	Percent   intstr.IntOrString     `json:"percent,omitzero"`
	Memory    resource.Quantity      `json:"memory,omitzero"`
	ByCode    map[int32]string       `json:"byCode,omitempty"`
	ByText    map[keyText]int32      `json:"byText,omitempty"`
	Version   string                 `json:"version,omitempty"`
	Immutable string                 `json:"immutable,omitempty"`
	Loose     *string                `json:"loose"`
	Conds     []MyCondition          `json:"conds,omitempty"`
	Tags      []string               `json:"tags"`
	Nums      map[string]*int32      `json:"nums,omitempty"`
	Ptrs      []*string              `json:"ptrs,omitempty"`
	Percents  []intstr.IntOrString   `json:"percents,omitempty"`
	Times     map[string]metav1.Time `json:"times,omitempty"`
}

var (
	cs ConstraintsSpec
	bd Bounds
)

// constraintRules are the rules of ConstraintsSpec: every kind of
// constraint.
func constraintRules() []kube.TypeRules {
	return []kube.TypeRules{
		kube.Rules(&cs,
			kube.Field(&cs.Ratio).ExclusiveMinimum(0).ExclusiveMaximum(1),
			kube.Field(&cs.Step).MultipleOf(5),
			kube.Field(&cs.ID).Format(kube.FormatUUID),
			kube.Field(&cs.Labels).MinProperties(1).MaxProperties(2),
			kube.Field(&cs.Args).Atomic(),
			kube.Field(&cs.Env).Atomic(),
			kube.Field(&cs.Window).Atomic(),
			kube.Field(&cs.Extra).PreserveUnknownFields(),
			kube.Field(&cs.Blob).PreserveUnknownFields(),
			kube.Field(&cs.Any).PreserveUnknownFields(),
			kube.Field(&cs.Embedded).EmbeddedResource(),
			kube.Field(&cs.Opt).Optional(),
			kube.Field(&cs.Req).Required(),
			kube.Items(kube.Field(&cs.Hosts), kube.Values[string]().Format(kube.FormatHostname).MaxLength(20)),
			kube.MapValues(kube.Field(&cs.Ports), kube.Values[int32]().Minimum(1).Maximum(65535)),
			kube.Field(&cs.Percent).Pattern(regexp.MustCompile(`^[0-9]+%$`)).MaxLength(4),
			kube.Field(&cs.Version).XValidation(kube.CEL{
				Rule:              "self.startsWith('v')",
				MessageExpression: "'version ' + self + ' must start with v'",
				Reason:            apiextensionsv1.FieldValueForbidden,
			}),
			kube.Field(&cs.Immutable).XValidation(kube.CEL{
				Rule:            "!oldSelf.hasValue() || self == oldSelf.value()",
				Message:         "immutable is immutable",
				OptionalOldSelf: true,
			}),
			kube.Field(&cs.Loose).Nullable(),
			kube.Items(kube.Field(&cs.Tags), kube.Values[string]().Enum("a", "b")),
			kube.MapValues(kube.Field(&cs.Nums), kube.Values[*int32]().Minimum(ptr[int32](0))),
			kube.Items(kube.Field(&cs.Ptrs), kube.Values[*string]().MinLength(1)),
			kube.Items(kube.Field(&cs.Percents), kube.Values[intstr.IntOrString]().Pattern(regexp.MustCompile(`^[0-9]+%$`))),
			kube.MapValues(kube.Field(&cs.Times), kube.Values[metav1.Time]().Format(kube.FormatDateTime)),
		),
		kube.Rules(&bd).XValidation(kube.CEL{
			Rule:              "self.min <= self.max",
			MessageExpression: "self.max < 0 ? 'max is negative, below min' : 'min exceeds max'",
			Reason:            apiextensionsv1.FieldValueInvalid,
			FieldPath:         ".min",
		}),
		kube.ValueRules(kube.Values[Phase]().Enum("Pending", "Running")),
		kube.ValueRules(kube.Values[Port]().Minimum(1).Maximum(65535)),
	}
}

// Constraints is a resource whose spec has every kind of constraint.
var Constraints = kube.Resource[ConstraintsSpec, struct{}]{
	Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Constrained", Plural: "constraineds",
	Scope: kube.Namespaced, Rules: constraintRules(),
}

// validConstraints is a spec the API server accepts.
func validConstraints() map[string]any {
	return map[string]any{
		"ratio": 0.5, "step": 10, "id": "6f1c2a9e-8c3b-4e5f-9a7d-1b2c3d4e5f60",
		"labels": map[string]any{"a": "b"}, "window": map[string]any{"min": 1, "max": 2},
		"req": "r", "loose": nil, "tags": []any{"a"},
	}
}

func TestConstraintsSetTheirSchemaKeywords(t *testing.T) {
	crd, err := Constraints.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	p := s.Properties

	require.Equal(t, ptr(0.0), p["ratio"].Minimum)
	require.True(t, p["ratio"].ExclusiveMinimum)
	require.Equal(t, ptr(1.0), p["ratio"].Maximum)
	require.True(t, p["ratio"].ExclusiveMaximum)
	require.Equal(t, ptr(5.0), p["step"].MultipleOf)
	require.Equal(t, "uuid", p["id"].Format)
	require.Equal(t, ptr[int64](1), p["labels"].MinProperties)
	require.Equal(t, ptr[int64](2), p["labels"].MaxProperties)
	require.False(t, p["labels"].Nullable, "a constrained map isn't nullable")
	require.Equal(t, ptr("atomic"), p["args"].XListType)
	require.Equal(t, ptr("atomic"), p["env"].XMapType)
	require.Equal(t, ptr("atomic"), p["window"].XMapType)
	require.Equal(t, apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}, p["extra"])
	require.Equal(t, apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr(true)}, p["blob"])
	require.Equal(t, apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptr(true)}, p["any"])
	require.True(t, p["embedded"].XEmbeddedResource)
	require.NotContains(t, s.Required, "opt")
	require.Contains(t, s.Required, "req")
	require.False(t, p["req"].Nullable)
	require.Equal(t, "hostname", p["hosts"].Items.Schema.Format)
	require.Equal(t, ptr[int64](20), p["hosts"].Items.Schema.MaxLength)
	require.Equal(t, ptr(1.0), p["ports"].AdditionalProperties.Schema.Minimum)
	require.Equal(t, ptr(65535.0), p["ports"].AdditionalProperties.Schema.Maximum)
	require.Equal(t, []apiextensionsv1.JSON{raw(`"Pending"`), raw(`"Running"`)}, p["phase"].Enum)
	require.Equal(t, []apiextensionsv1.JSON{raw(`"Pending"`), raw(`"Running"`)}, p["phases"].Items.Schema.Enum)
	require.Equal(t, ptr(1.0), p["port"].Minimum)
	require.Equal(t, `^[0-9]+%$`, p["percent"].Pattern)
	require.Equal(t, ptr[int64](4), p["percent"].MaxLength)
	require.NotEmpty(t, p["memory"].Pattern)
	require.Equal(t, apiextensionsv1.ValidationRules{{
		Rule: "self.startsWith('v')", MessageExpression: "'version ' + self + ' must start with v'",
		Reason: ptr(apiextensionsv1.FieldValueForbidden),
	}}, p["version"].XValidations)
	require.Equal(t, ptr(true), p["immutable"].XValidations[0].OptionalOldSelf)
	require.Equal(t, ".min", p["window"].XValidations[0].FieldPath)
	require.True(t, p["loose"].Nullable)
	require.False(t, p["conds"].Items.Schema.Properties["lastTransitionTime"].Nullable, "a user's own condition's lastTransitionTime")
	require.Contains(t, p["conds"].Items.Schema.Required, "lastTransitionTime")
	require.True(t, p["tags"].Nullable, "item constraints don't constrain the list itself")
	require.False(t, p["nums"].AdditionalProperties.Schema.Nullable, "a constrained pointer value")
	require.False(t, p["ptrs"].Items.Schema.Nullable, "a constrained pointer item")
	require.Equal(t, "date-time", p["times"].AdditionalProperties.Schema.Format)
	require.False(t, p["times"].AdditionalProperties.Schema.Nullable, "a constrained zero time")

	requireServerAccepts(t, crd, validConstraints())
}

func TestMapKeysEncodingJSONEncodesAreAccepted(t *testing.T) {
	type keys struct {
		Ints  map[int]string     `json:"ints"`
		Uints map[uint8]string   `json:"uints"`
		Text  map[keyText]string `json:"text"`
	}
	s := specOf[keys](t)
	for _, name := range []string{"ints", "uints", "text"} {
		require.Equal(t, "object", s.Properties[name].Type)
		require.Equal(t, "string", s.Properties[name].AdditionalProperties.Schema.Type)
	}
	v := keys{Ints: map[int]string{-1: "a"}, Uints: map[uint8]string{2: "b"}, Text: map[keyText]string{{"x", "y"}: "c"}}
	requireServerAccepts(t, resourceMust(t, resourceOf[keys]()), v)
}

// resourceMust is r's CRD.
func resourceMust[S any](t *testing.T, r kube.Resource[S, struct{}]) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, err := r.CRD()
	require.NoError(t, err)
	return crd
}

func TestConstraintsThatDontFitAreErrors(t *testing.T) {
	var c constrained
	_, err := resourceOf[constrained](kube.Rules(&c,
		kube.Field(&c.Name).ExclusiveMinimum("a"),
		kube.Field(&c.Count).MultipleOf(0),
		kube.Field(&c.Ratio).MultipleOf(-0.5),
		kube.Field(&c.Count).Format(kube.FormatUUID),
		kube.Field(&c.Name).MinProperties(1),
		kube.Field(&c.Items).MaxProperties(-1),
		kube.Field(&c.Count).Atomic(),
		kube.Field(&c.Name).PreserveUnknownFields(),
		kube.Field(&c.Items).EmbeddedResource(),
		kube.Items(kube.Field(&c.Items), kube.Values[string]().Minimum("a").MaxItems(2)),
		kube.MapValues(kube.Field(&c.Labels), kube.Values[string]().Format("")),
		kube.Field(&c.Name).XValidation(kube.CEL{Reason: "Because"}),
	), kube.ValueRules(kube.Values[Window]().Pattern(regexp.MustCompile("x"))),
		kube.ValueRules(kube.Values[string]().MaxLength(3))).CRD()
	requireErrorsContain(t, err,
		"kube: ValueRules[string]: string is not a type of your own",
		"kube: spec.name: Rules for kube_test.constrained: constrained.Name: ExclusiveMinimum fits a number, not string",
		"constrained.Count: MultipleOf is 0: it must be greater than 0",
		"constrained.Ratio: MultipleOf is -0.5: it must be greater than 0",
		"constrained.Count: Format fits a field of type string, not integer",
		"constrained.Name: MinProperties fits a field of type object, not string",
		"constrained.Items: MaxProperties fits a field of type object, not array",
		"constrained.Count: Atomic fits a list, a map or a struct, not integer",
		"constrained.Name: PreserveUnknownFields fits a map, a struct or an interface, not string",
		"constrained.Items: EmbeddedResource fits a field of type object, not array",
		"constrained.Items: Items Minimum fits a number, not string",
		"MaxItems fits a field of type array, not string",
		"constrained.Labels: MapValues Format is empty",
		"constrained.Name: Validation has no Rule",
		`has Reason "Because": use one of apiextensionsv1.FieldValueInvalid`,
		"kube: spec.window: ValueRules for kube_test.Window: Pattern fits a field of type string, not object",
	)
}

func TestRuleErrorsSayWhatToDoInstead(t *testing.T) {
	var p Phase
	type free struct {
		Values map[string]any `json:"values"`
	}
	_, err := resourceOf[one[Phase]](kube.Rules(&p, kube.Field(&p).MinLength(1))).CRD()
	requireErrorsContain(t, err, "kube.ValueRules(kube.Values[kube_test.Phase]()...)")
	_, err = resourceOf[free]().CRD()
	requireErrorsContain(t, err, "kube: spec.values[*]: interface {} is an interface, whose encoding has no schema: give the field that holds it PreserveUnknownFields")
}

func TestAnIntOrStringTakesAStringsConstraints(t *testing.T) {
	var v one[intstr.IntOrString]
	s := specOf[one[intstr.IntOrString]](t, kube.Rules(&v, kube.Field(&v.F).MinLength(1).MaxLength(4).Pattern(regexp.MustCompile(`^[0-9]+%?$`))))
	require.Equal(t, ptr[int64](1), s.Properties["f"].MinLength)
	crd := resourceMust(t, resourceOf[one[intstr.IntOrString]](kube.Rules(&v, kube.Field(&v.F).MaxLength(4).Pattern(regexp.MustCompile(`^[0-9]+%?$`)))))
	requireServerAccepts(t, crd, one[intstr.IntOrString]{F: intstr.FromString("50%")})
	requireServerAccepts(t, crd, one[intstr.IntOrString]{F: intstr.FromInt32(12345)})
	require.Equal(t, []string{`spec.f: Invalid value: "lots": spec.f in body should match '^[0-9]+%?$'`},
		serverObjectErrors(t, crd, one[intstr.IntOrString]{F: intstr.FromString("lots")}))
}

func TestAQuantityMustLookLikeOne(t *testing.T) {
	crd := resourceMust(t, resourceOf[one[resource.Quantity]]())
	requireServerAccepts(t, crd, one[resource.Quantity]{F: resource.MustParse("1.5Gi")})
	requireServerAccepts(t, crd, map[string]any{"f": 3})
	got := serverObjectErrors(t, crd, map[string]any{"f": "lots"})
	require.Len(t, got, 1)
	require.Contains(t, got[0], "spec.f in body should match '^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$'")
}
