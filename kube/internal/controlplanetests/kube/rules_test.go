package kube_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube"
)

type constrained struct {
	Count  int32             `json:"count"`
	Ratio  float64           `json:"ratio"`
	Name   string            `json:"name"`
	Big    uint64            `json:"big"`
	Ptr    *int32            `json:"ptr,omitempty"`
	Items  []string          `json:"items"`
	Array  [3]int32          `json:"array"`
	Ports  []Endpoint        `json:"ports"`
	Labels map[string]string `json:"labels"`
	Size   resource.Quantity `json:"size"`
	Window Window            `json:"window"`
	Data   []byte            `json:"data"`
}

func raw(s string) apiextensionsv1.JSON { return apiextensionsv1.JSON{Raw: []byte(s)} }

func TestFieldOfMethodsSetTheirSchemaKeywords(t *testing.T) {
	var c constrained
	got := specOf[constrained](t, kube.Rules(&c,
		kube.Field(&c.Count).Minimum(1).Maximum(10).Description("how many").Default(3).Enum(1, 3, 10),
		kube.Field(&c.Ratio).Minimum(0.25).Maximum(0.75),
		kube.Field(&c.Big).Maximum(1<<40),
		kube.Field(&c.Ptr).Minimum(ptr[int32](2)),
		kube.Field(&c.Name).MinLength(1).MaxLength(8).Pattern(regexp.MustCompile(`^[a-z]+$`)).
			Validation("self != 'root'", "name must not be root"),
		kube.Field(&c.Items).MinItems(1).MaxItems(3).ListSet(),
		kube.Field(&c.Array).MaxItems(3).ListSet(),
		kube.Field(&c.Ports).ListMap("name").MaxItems(8),
		kube.Field(&c.Labels).Default(map[string]string{"a": "b"}),
		kube.Field(&c.Data).MaxLength(100),
		kube.Field(&c.Size).Validation("quantity(string(self)).isGreaterThan(quantity('1'))", "size must exceed 1").Default(resource.MustParse("2Gi")),
	))

	count := got.Properties["count"]
	require.Equal(t, ptr(1.0), count.Minimum)
	require.Equal(t, ptr(10.0), count.Maximum)
	require.Equal(t, "how many", count.Description)
	require.Equal(t, &apiextensionsv1.JSON{Raw: []byte("3")}, count.Default)
	require.Equal(t, []apiextensionsv1.JSON{raw("1"), raw("3"), raw("10")}, count.Enum)

	require.Equal(t, ptr(0.25), got.Properties["ratio"].Minimum)
	require.Equal(t, ptr(0.75), got.Properties["ratio"].Maximum)
	require.Equal(t, ptr(float64(1<<40)), got.Properties["big"].Maximum)
	require.Equal(t, ptr(2.0), got.Properties["ptr"].Minimum)

	name := got.Properties["name"]
	require.Equal(t, ptr(int64(1)), name.MinLength)
	require.Equal(t, ptr(int64(8)), name.MaxLength)
	require.Equal(t, "^[a-z]+$", name.Pattern)
	require.Equal(t, apiextensionsv1.ValidationRules{{Rule: "self != 'root'", Message: "name must not be root"}}, name.XValidations)

	items := got.Properties["items"]
	require.Equal(t, ptr(int64(1)), items.MinItems)
	require.Equal(t, ptr(int64(3)), items.MaxItems)
	require.Equal(t, ptr("set"), items.XListType)
	require.Equal(t, ptr("set"), got.Properties["array"].XListType)

	ports := got.Properties["ports"]
	require.Equal(t, ptr("map"), ports.XListType)
	require.Equal(t, []string{"name"}, ports.XListMapKeys)

	require.Equal(t, &apiextensionsv1.JSON{Raw: []byte(`{"a":"b"}`)}, got.Properties["labels"].Default)
	require.Equal(t, &apiextensionsv1.JSON{Raw: []byte(`"2Gi"`)}, got.Properties["size"].Default)
	require.Equal(t, ptr(int64(100)), got.Properties["data"].MaxLength)

	require.Equal(t, []string{"ratio", "name", "big", "items", "array", "ports", "window", "data"}, got.Required,
		"count, labels and size are defaulted, so optional")
}

func TestFieldOfIsAValue(t *testing.T) {
	var c constrained
	base := kube.Field(&c.Count).Minimum(1)
	withMax := base.Maximum(5)
	withDefault := base.Default(2)

	got := specOf[constrained](t, kube.Rules(&c, base))
	require.Nil(t, got.Properties["count"].Maximum, "Maximum on a copy leaves the original alone")
	require.Contains(t, got.Required, "count", "Default on a copy leaves the original alone")

	got = specOf[constrained](t, kube.Rules(&c, withMax))
	require.Equal(t, ptr(5.0), got.Properties["count"].Maximum)
	require.Nil(t, got.Properties["count"].Default)

	got = specOf[constrained](t, kube.Rules(&c, withDefault))
	require.Nil(t, got.Properties["count"].Maximum)
	require.NotContains(t, got.Required, "count")

	rules := kube.Rules(&window)
	a := rules.Validation("self.min <= self.max", "a")
	_ = rules.Validation("self.min >= 0", "b")
	got = specOf[one[Window]](t, a)
	require.Len(t, got.Properties["f"].XValidations, 1)
}

func TestAConstraintSetTwiceTakesItsLastValue(t *testing.T) {
	var c constrained
	got := specOf[constrained](t, kube.Rules(&c, kube.Field(&c.Count).Minimum(1).Minimum(2)))
	require.Equal(t, ptr(2.0), got.Properties["count"].Minimum)
}

// Rules belong to a type, and apply wherever it appears.
type twoWindows struct {
	First  Window   `json:"first"`
	Second *Window  `json:"second,omitempty"`
	Many   []Window `json:"many,omitempty"`
}

func TestRulesBelongToATypeAndApplyWhereverItAppears(t *testing.T) {
	var w Window
	rules := kube.Rules(&w, kube.Field(&w.Max).Maximum(9).Description("the most")).
		Description("a window").
		Validation("self.min <= self.max", "min must not exceed max")
	got := specOf[twoWindows](t, rules)
	for _, s := range []apiextensionsv1.JSONSchemaProps{
		got.Properties["first"],
		got.Properties["second"],
		*got.Properties["many"].Items.Schema,
	} {
		require.Equal(t, "a window", s.Description)
		require.Equal(t, ptr(9.0), s.Properties["max"].Maximum)
		require.Equal(t, "the most", s.Properties["max"].Description)
		require.Equal(t, apiextensionsv1.ValidationRules{{Rule: "self.min <= self.max", Message: "min must not exceed max"}}, s.XValidations)
	}
}

type withBase struct {
	Base
	Window
	Extra string `json:"extra"`
}

func TestRulesConstrainPromotedFieldsAndEmbeddedTypesRules(t *testing.T) {
	var v withBase
	var b Base
	got := specOf[withBase](t,
		kube.Rules(&v, kube.Field(&v.Owner).MaxLength(5), kube.Field(&v.Min).Minimum(0)),
		kube.Rules(&b, kube.Field(&b.Owner).MinLength(2).MaxLength(10)),
		kube.Rules(&window).Validation("self.min <= self.max", "min must not exceed max"),
	)
	owner := got.Properties["owner"]
	require.Equal(t, ptr(int64(2)), owner.MinLength, "Base's own rule applies where Base is embedded")
	require.Equal(t, ptr(int64(5)), owner.MaxLength, "the outer type's rule on a promoted field wins")
	require.Equal(t, ptr(0.0), got.Properties["min"].Minimum)
	require.Equal(t, apiextensionsv1.ValidationRules{{Rule: "self.min <= self.max", Message: "min must not exceed max"}}, got.XValidations,
		"an embedded type's validations hold of the struct it is inlined in")
}

func TestSchemaGivesATypesSchemaWhole(t *testing.T) {
	type s struct {
		Color    Color   `json:"color"`
		Optional *Color  `json:"optional,omitempty"`
		Nullable *Color  `json:"nullable"`
		Colors   []Color `json:"colors,omitempty"`
	}
	var v s
	got := specOf[s](t,
		kube.Schema[Color](colourSchema).Description("a colour"),
		kube.Rules(&v, kube.Field(&v.Color).Default(Green), kube.Field(&v.Colors).ListSet()),
	)
	want := colourSchema
	want.Description = "a colour"
	wantDefault := want
	wantDefault.Default = &apiextensionsv1.JSON{Raw: []byte(`"green"`)}
	require.Equal(t, wantDefault, got.Properties["color"])
	require.Equal(t, want, got.Properties["optional"])
	wantNullable := want
	wantNullable.Nullable = true
	require.Equal(t, wantNullable, got.Properties["nullable"])
	require.Equal(t, want, *got.Properties["colors"].Items.Schema)
	require.Equal(t, []string{"nullable"}, got.Required)

	// Schema copies s: changing it afterwards changes nothing.
	mine := apiextensionsv1.JSONSchemaProps{Type: "string"}
	rules := kube.Schema[Color](mine)
	mine.Type = "integer"
	require.Equal(t, "string", specOf[one[Color]](t, rules).Properties["f"].Type)
}

func TestANonStructuralSchemaFailsTheAPIServersValidation(t *testing.T) {
	// The check every test of a CRD goes through catches a schema the API
	// server would refuse: here, one with no type.
	crd, err := resourceOf[one[Color]](kube.Schema[Color](apiextensionsv1.JSONSchemaProps{Description: "no type"})).CRD()
	require.NoError(t, err, "CRD doesn't check a Schema's structure")
	errs := serverErrors(t, crd)
	require.NotEmpty(t, errs)
	require.Contains(t, errs[0], "spec.validation.openAPIV3Schema.properties[spec].properties[f].type: Required value: must not be empty for specified object fields")
}

func TestRuleErrorsNameTheFieldAndConstraint(t *testing.T) {
	var c constrained
	var e Endpoint
	type optionalKey struct {
		Items []struct {
			Key  string  `json:"key,omitempty"`
			Ptr  *string `json:"ptr"`
			Sub  Window  `json:"sub"`
			Same string  `json:"same"`
		} `json:"items"`
		Ptrs  []*Endpoint   `json:"ptrs"`
		Times []metav1.Time `json:"times"`
		Stamp []struct {
			At metav1.Time `json:"at"`
		} `json:"stamp"`
	}
	var o optionalKey
	_, err := resourceOf[constrained](kube.Rules(&c,
		kube.Field(&c.Name).Minimum("a"),
		kube.Field(&c.Count).Pattern(regexp.MustCompile("x")),
		kube.Field(&c.Count).MinLength(1),
		kube.Field(&c.Name).MaxItems(2),
		kube.Field(&c.Labels).ListSet(),
		kube.Field(&c.Ports).ListSet(),
		kube.Field(&c.Items).ListMap("name"),
		kube.Field(&c.Size).Maximum(resource.MustParse("1")),
		kube.Field(&c.Ports).ListMap(),
		kube.Field(&c.Ports).ListMap("nope", "port", "port"),
		kube.Field(&c.Window).MinItems(-1),
		kube.Field(&c.Name).Pattern(nil),
		kube.Field(&c.Count).Enum(),
		kube.Field(&c.Ratio).MinItems(1),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: spec.name: Rules for kube_test.constrained: constrained.Name: Minimum fits a number, not string",
		"kube: spec.count: Rules for kube_test.constrained: constrained.Count: Pattern fits a field of type string, not integer",
		"constrained.Count: MinLength fits a field of type string, not integer",
		"constrained.Name: MaxItems fits a field of type array, not string",
		"constrained.Labels: ListSet fits a field of type array, not object",
		"constrained.Ports: ListSet fits a list of scalars, not of objects: use ListMap",
		"constrained.Items: ListMap fits a list of structs",
		"constrained.Size: Maximum fits a number, not int-or-string",
		"constrained.Ports: ListMap has no keys",
		`key "nope" is not a field of the items`,
		`key "port" is given twice`,
		"constrained.Window: MinItems fits a field of type array, not object",
		"constrained.Name: Pattern is nil",
		"constrained.Count: Enum has no values",
		"constrained.Ratio: MinItems fits a field of type array, not number",
	)

	_, err = resourceOf[optionalKey](kube.Rules(&o,
		kube.Field(&o.Items).ListMap("key", "ptr", "sub", "same"),
		kube.Field(&o.Ptrs).ListMap("name"),
		kube.Field(&o.Times).ListSet(),
		kube.Field(&o.Stamp).ListMap("at"),
	), kube.Rules(&e)).CRD()
	requireErrorsContain(t, err,
		`key "key" is optional: a key must be required (no omitempty or omitzero) or have a Default`,
		`key "ptr" is nullable, and a key can't be`,
		`key "sub" is a object, not a scalar`,
		"optionalKey.Ptrs: ListMap fits a list of structs, not of pointers",
		// A zero metav1.Time encodes as null.
		"optionalKey.Times: ListSet fits a list whose items can't be null, not of pointers, slices, maps, metav1.Times or RawExtensions",
		`optionalKey.Stamp: ListMap key "at" is nullable, and a key can't be`,
	)
	require.NotContains(t, err.Error(), `"same"`)
}

func TestAListMapKeyMayBeDefaulted(t *testing.T) {
	// Endpoint's protocol is omitempty, and its Default makes it a key.
	var s struct {
		Ports []Endpoint `json:"ports"`
	}
	got := specOf[struct {
		Ports []Endpoint `json:"ports"`
	}](t, kube.Rules(&s, kube.Field(&s.Ports).ListMap("name", "protocol")), kube.Rules(&endpoint, kube.Field(&endpoint.Protocol).Default("TCP")))
	require.Equal(t, []string{"name", "protocol"}, got.Properties["ports"].XListMapKeys)

	_, err := resourceOf[struct {
		Ports []Endpoint `json:"ports"`
	}](kube.Rules(&s, kube.Field(&s.Ports).ListMap("name", "protocol"))).CRD()
	requireErrorsContain(t, err, `key "protocol" is optional`)
}

type outer struct {
	Window Window `json:"window"`
	Inner  struct {
		Deep Window `json:"deep"`
	} `json:"inner"`
	Array  [2]Window `json:"array"`
	Hidden string    `json:"-"`
	ptr    *Window
	Ptr    *Window `json:"ptr"`
}

func TestRulesThatNameNoFieldAreErrors(t *testing.T) {
	var o, other outer
	_, err := resourceOf[outer](kube.Rules(&o,
		kube.Field(&o.Window.Max).Maximum(1),
		kube.Field(&o.Inner.Deep.Min).Minimum(1),
		kube.Field(&other.Window),
		kube.Field(&o.Array[1].Min),
		kube.Field(&o),
		kube.Field(&o.Hidden).MinLength(1),
		kube.Field(&o.ptr),
		kube.Field[int32](nil),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: Rules for kube_test.outer: field rule 1 (a int32): it names outer.Window.Max, a field of the nested struct kube_test.Window: constrain it in Rules for kube_test.Window",
		"field rule 2 (a int32): it names outer.Inner.Deep.Min, a field of the nested struct kube_test.Window: constrain it in Rules for kube_test.Window",
		"field rule 3 (a kube_test.Window) points outside the value given to Rules, so it names no field of kube_test.outer",
		"field rule 4 (a int32): it points into the array kube_test.outer.Array, not at a field",
		"field rule 5 (a kube_test.outer): it names no field of kube_test.outer",
		`kube: Rules for kube_test.outer: field outer.Hidden isn't encoded (it is unexported, tagged json:"-", or hidden by another field of its name), so it has no schema to constrain`,
		"field outer.ptr isn't encoded",
		"field rule 8 is a Field of a nil pointer, which names no field",
	)

	// A field promoted through an embedded pointer is outside the value.
	type viaPtr struct{ *Window }
	v := viaPtr{Window: &Window{}}
	_, err = resourceOf[viaPtr](kube.Rules(&v, kube.Field(&v.Min).Minimum(0))).CRD()
	requireErrorsContain(t, err, "points outside the value given to Rules")

	_, err = resourceOf[outer](kube.Rules[outer](nil)).CRD()
	requireErrorsContain(t, err, "kube: Rules for kube_test.outer: v is nil, so it names no fields")
}

func TestTwoRulesForOneTypeAreAnError(t *testing.T) {
	var a, b Window
	_, err := resourceOf[Window](kube.Rules(&a), kube.Rules(&b)).CRD()
	requireErrorsContain(t, err, "kube: two Rules for kube_test.Window: a type has one Rules, or one Schema")
	_, err = resourceOf[one[Color]](kube.Schema[Color](colourSchema), kube.Schema[Color](colourSchema)).CRD()
	requireErrorsContain(t, err, "kube: two Rules for kube_test.Color")
	_, err = resourceOf[Window](kube.Rules(&a), kube.Schema[Window](colourSchema)).CRD()
	requireErrorsContain(t, err, "kube: two Rules for kube_test.Window")
}

func TestRulesForATypeThatAppearsNowhereAreAnError(t *testing.T) {
	_, err := resourceOf[Window](kube.Rules(&endpoint, kube.Field(&endpoint.Port).Minimum(1))).CRD()
	requireErrorsContain(t, err, "kube: Rules for kube_test.Endpoint: kube_test.Endpoint appears nowhere in Spec or Status")
	_, err = resourceOf[Window](kube.TypeRules{}).CRD()
	requireErrorsContain(t, err, "kube: Rules[0] is a zero TypeRules, which names no type: make it with Rules or Schema")
}

func TestRulesOnStatusAndConditions(t *testing.T) {
	crd, err := Memcached.CRD()
	require.NoError(t, err)
	conditions := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["conditions"]
	require.Equal(t, ptr("map"), conditions.XListType)
	require.Equal(t, []string{"type"}, conditions.XListMapKeys)
	item := conditions.Items.Schema
	require.Equal(t, []string{"type", "status", "lastTransitionTime", "reason", "message"}, item.Required)
	ltt := item.Properties["lastTransitionTime"]
	require.Equal(t, "string", ltt.Type)
	require.Equal(t, "date-time", ltt.Format)
	require.False(t, ltt.Nullable)
	require.Contains(t, ltt.Description, "lastTransitionTime is the last time the condition transitioned", "metav1.Condition's own description, from the API server's schema")
	_ = metav1.Condition{}
}

func TestTypeRulesOnANamedScalar(t *testing.T) {
	type port int32
	var p port
	got := specOf[one[port]](t, kube.Rules(&p).Description("a port").Validation("self > 0", "must be positive"))
	require.Equal(t, apiextensionsv1.JSONSchemaProps{
		Type: "integer", Format: "int32", Description: "a port",
		XValidations: apiextensionsv1.ValidationRules{{Rule: "self > 0", Message: "must be positive"}},
	}, got.Properties["f"])
}

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

func TestAConstraintWhoseValuePanicsIsAnError(t *testing.T) {
	type s struct {
		P panicky `json:"p"`
	}
	var v s
	_, err := resourceOf[s](
		kube.Schema[panicky](apiextensionsv1.JSONSchemaProps{Type: "string"}),
		kube.Rules(&v, kube.Field(&v.P).Default(panicky{})),
	).CRD()
	requireErrorsContain(t, err, "s.P: Default panicked: boom")
}

// PromotedThroughAPointer is embedded by pointer in viaPointer.
type PromotedThroughAPointer struct {
	A int32 `json:"a"`
}

type viaPointer struct {
	*PromotedThroughAPointer
	X int32 `json:"x"`
}

var (
	via      = viaPointer{PromotedThroughAPointer: &PromotedThroughAPointer{}}
	promoted PromotedThroughAPointer
)

func TestARuleOnAFieldPromotedThroughAnEmbeddedPointerNamesItsOwnRules(t *testing.T) {
	_, err := resourceOf[viaPointer](kube.Rules(&via, kube.Field(&via.A).Minimum(1))).CRD()
	require.EqualError(t, err, "kube: Rules for kube_test.viaPointer: field rule 1 (a int32) points outside the value given to Rules: it names viaPointer.PromotedThroughAPointer.A, promoted through the embedded pointer *kube_test.PromotedThroughAPointer: constrain it in Rules for kube_test.PromotedThroughAPointer")

	// Its own Rules constrain it where it is promoted.
	crd, err := resourceOf[viaPointer](kube.Rules(&promoted, kube.Field(&promoted.A).Minimum(1))).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	require.Equal(t, 1.0, *crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["a"].Minimum)
}

type loops struct {
	*loops
	X int32 `json:"x"`
}

func TestARuleOutsideAValueWhoseEmbeddedPointerLoopsIsAnError(t *testing.T) {
	var v loops
	v.loops = &v
	var other int32
	var err error
	require.NotPanics(t, func() { _, err = resourceOf[loops](kube.Rules(&v, kube.Field(&other))).CRD() })
	require.ErrorContains(t, err, "field rule 1 (a int32) points outside the value given to Rules, so it names no field")
}

func TestTitleAndExampleAreKeptAndCheckNothing(t *testing.T) {
	var c constrained
	r := resourceOf[constrained](kube.Rules(&c,
		kube.Field(&c.Count).Title("Count").Example(4).Maximum(5),
		kube.Field(&c.Items).Example([]string{"a", "b"}),
	))
	crd, err := r.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	got := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	require.Equal(t, "Count", got.Properties["count"].Title)
	require.Equal(t, ptr(raw("4")), got.Properties["count"].Example)
	require.Equal(t, ptr(raw(`["a","b"]`)), got.Properties["items"].Example)
	require.True(t, got.Properties["items"].Nullable, "an Example doesn't constrain the value, so a nil slice stays nullable")
}
