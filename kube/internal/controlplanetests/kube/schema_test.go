package kube_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/z5labs/humus/kube"
)

// one is a spec with one field, of type T.
type one[T any] struct {
	F T `json:"f"`
}

// resourceOf is a Resource whose Spec is S, with rules.
func resourceOf[S any](rules ...kube.TypeRules) kube.Resource[S, struct{}] {
	return kube.Resource[S, struct{}]{
		Group: "test.humus.z5labs.dev", Version: "v1", Kind: "Test", Plural: "tests",
		Scope: kube.Namespaced, Rules: rules,
	}
}

// specOf is the schema of spec for a Spec of type S, which the API
// server's code must accept.
func specOf[S any](t *testing.T, rules ...kube.TypeRules) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	crd, err := resourceOf[S](rules...).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// propOf is the schema of a field of type T.
func propOf[T any](t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	return specOf[one[T]](t).Properties["f"]
}

type named string

type textual struct{ a, b int }

func (x textual) MarshalText() ([]byte, error) { return []byte("a-b"), nil }

func TestSchemaOfEveryRowOfTheTable(t *testing.T) {
	var (
		int32Schema  = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}
		int64Schema  = apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
		stringSchema = apiextensionsv1.JSONSchemaProps{Type: "string"}
		intOrString  = apiextensionsv1.JSONSchemaProps{XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}}
		quantity     = apiextensionsv1.JSONSchemaProps{
			XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
			Pattern: `^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`,
		}
		arrayOf = func(s apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
			return apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &s}}
		}
		nullable = func(s apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps { s.Nullable = true; return s }
	)
	for _, row := range []struct {
		name string
		got  func(t *testing.T) apiextensionsv1.JSONSchemaProps
		want apiextensionsv1.JSONSchemaProps
	}{
		{"bool", propOf[bool], apiextensionsv1.JSONSchemaProps{Type: "boolean"}},
		{"int8", propOf[int8], int32Schema},
		{"int16", propOf[int16], int32Schema},
		{"int32", propOf[int32], int32Schema},
		{"uint8", propOf[uint8], int32Schema},
		{"uint16", propOf[uint16], int32Schema},
		{"int", propOf[int], int64Schema},
		{"int64", propOf[int64], int64Schema},
		{"uint", propOf[uint], int64Schema},
		{"uint32", propOf[uint32], int64Schema},
		{"uint64", propOf[uint64], int64Schema},
		{"float32", propOf[float32], apiextensionsv1.JSONSchemaProps{Type: "number"}},
		{"float64", propOf[float64], apiextensionsv1.JSONSchemaProps{Type: "number"}},
		{"string", propOf[string], stringSchema},
		{"a named string", propOf[named], stringSchema},
		{"[]byte", propOf[[]byte], nullable(apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"})},
		{"[]uint8", propOf[[]uint8], nullable(apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"})},
		{"a slice", propOf[[]string], nullable(arrayOf(stringSchema))},
		{"an array", propOf[[3]int32], arrayOf(int32Schema)},
		{"an array of bytes is numbers", propOf[[4]byte], arrayOf(int32Schema)},
		{"a slice of slices", propOf[[][]bool], nullable(arrayOf(nullable(arrayOf(apiextensionsv1.JSONSchemaProps{Type: "boolean"}))))},
		{"a slice of pointers", propOf[[]*string], nullable(arrayOf(nullable(stringSchema)))},
		{"map[string]V", propOf[map[string]int32], nullable(apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &int32Schema}})},
		{"map[named]V", propOf[map[named]string], nullable(apiextensionsv1.JSONSchemaProps{Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &stringSchema}})},
		{"a struct", propOf[Window], apiextensionsv1.JSONSchemaProps{
			Type:       "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"min": int32Schema, "max": int32Schema},
			Required:   []string{"min", "max"},
		}},
		{"an empty struct", propOf[struct{}], apiextensionsv1.JSONSchemaProps{Type: "object"}},
		{"*T", propOf[*int32], nullable(int32Schema)},
		{"**T", propOf[**string], nullable(stringSchema)},
		// A zero metav1.Time, MicroTime or RawExtension encodes as null,
		// which the API server refuses in a field that isn't nullable.
		{"metav1.Time", propOf[metav1.Time], nullable(apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"})},
		{"metav1.MicroTime", propOf[metav1.MicroTime], nullable(apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"})},
		{"*metav1.Time", propOf[*metav1.Time], apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time", Nullable: true}},
		{"metav1.Duration", propOf[metav1.Duration], stringSchema},
		// The pattern the API server's own types carry for a Quantity.
		{"resource.Quantity", propOf[resource.Quantity], quantity},
		{"intstr.IntOrString", propOf[intstr.IntOrString], intOrString},
		{"runtime.RawExtension", propOf[runtime.RawExtension], nullable(apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)})},
		{"metav1.ObjectMeta", propOf[metav1.ObjectMeta], apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}},
		{"an encoding.TextMarshaler is a string", propOf[textual], stringSchema},
	} {
		t.Run(row.name, func(t *testing.T) {
			require.Equal(t, row.want, row.got(t))
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestSchemaOfAFieldIsRequiredUnlessOmitemptyOmitzeroOrDefault(t *testing.T) {
	type s struct {
		Plain     string  `json:"plain"`
		Empty     string  `json:"empty,omitempty"`
		Zero      string  `json:"zero,omitzero"`
		Both      string  `json:"both,omitempty,omitzero"`
		Defaulted string  `json:"defaulted"`
		Untagged  string  ``
		Ptr       *string `json:"ptr"`
		OmitPtr   *string `json:"omitPtr,omitempty"`
		ZeroPtr   *string `json:"zeroPtr,omitzero"`
	}
	var v s
	got := specOf[s](t, kube.Rules(&v, kube.Field(&v.Defaulted).Default("x")))
	require.Equal(t, []string{"plain", "Untagged", "ptr"}, got.Required)
	require.True(t, got.Properties["ptr"].Nullable, "a pointer without omitempty or omitzero is nullable")
	require.False(t, got.Properties["omitPtr"].Nullable, "omitempty leaves a nil pointer out")
	require.False(t, got.Properties["zeroPtr"].Nullable, "omitzero leaves a nil pointer out")
	require.False(t, got.Properties["plain"].Nullable)
}

func TestSchemaOfAFieldThatEncodesAsNullIsNullable(t *testing.T) {
	type s struct {
		Slice      []string          `json:"slice"`
		Map        map[string]string `json:"map"`
		Bytes      []byte            `json:"bytes"`
		Ptr        *int32            `json:"ptr"`
		OmitSlice  []string          `json:"omitSlice,omitempty"`
		ZeroMap    map[string]string `json:"zeroMap,omitzero"`
		Defaulted  []string          `json:"defaulted"`
		DefaultPtr *int32            `json:"defaultPtr"`
		Array      [2]string         `json:"array"`
		Text       textual           `json:"text"`
		Colors     Color             `json:"colors"`
	}
	var v s
	got := specOf[s](t,
		kube.Rules(&v, kube.Field(&v.Defaulted).Default([]string{"a"}), kube.Field(&v.DefaultPtr).Default(ptr[int32](1))),
		kube.Schema[Color](colourSchema),
	)
	for name, want := range map[string]bool{
		"slice": true, "map": true, "bytes": true, "ptr": true,
		"omitSlice": false, "zeroMap": false, "defaulted": false, "defaultPtr": false,
		"array": false, "text": false, "colors": false,
	} {
		require.Equal(t, want, got.Properties[name].Nullable, name)
	}
	b, err := json.Marshal(s{Colors: Red})
	require.NoError(t, err)
	require.JSONEq(t, `{"slice":null,"map":null,"bytes":null,"ptr":null,"defaulted":null,"defaultPtr":null,"array":["",""],"text":"a-b","colors":"red"}`, string(b),
		"each nullable field is one encoding/json writes null for; a defaulted one is dropped by the API server, and defaulted")
}

func TestSchemaFollowsEncodingJSONTags(t *testing.T) {
	type s struct {
		Renamed    string `json:"renamed"`
		Skipped    string `json:"-"`
		Dash       string `json:"-,"`
		unexported string
		NoName     int32  `json:",omitempty"`
		Quoted     int64  `json:"quoted,string"`
		QuotedPtr  *bool  `json:"quotedPtr,string,omitempty"`
		BadName    string `json:"a\"b"`
		Inline     Window `json:",inline"`
	}
	got := specOf[s](t)
	require.ElementsMatch(t, []string{"renamed", "-", "NoName", "quoted", "quotedPtr", "BadName", "Inline"}, slices.Collect(maps.Keys(got.Properties)))
	require.Equal(t, apiextensionsv1.JSONSchemaProps{Type: "string"}, got.Properties["quoted"], `",string" encodes a number as a string`)
	require.Equal(t, apiextensionsv1.JSONSchemaProps{Type: "string"}, got.Properties["quotedPtr"])
	require.Equal(t, "object", got.Properties["Inline"].Type, `",inline" means nothing to encoding/json on a field that isn't embedded`)
	requireSchemaMatchesEncoding(t, got, s{})
}

// The types embedded below, as in encoding/json's own tests of embedding.
type (
	embA struct {
		Name string `json:"name"`
		X    int32  `json:"x"`
	}
	embB struct {
		Name string
		Y    int32
	}
	embC struct{ Name string }
	embD struct {
		Tagged string `json:"Name"`
	}
	embF struct {
		Other bool `json:"name"`
	}
	embNamed string
	// EmbName is an exported non-struct type, for embedding.
	EmbName string
	embDeep struct{ embA }
	embSelf struct {
		*embSelf
		Z int32 `json:"z"`
	}
	embUnexported struct {
		Promoted string `json:"promoted"`
	}
)

func TestSchemaInlinesEmbeddedStructsAsEncodingJSONDoes(t *testing.T) {
	t.Run("promoted fields", func(t *testing.T) {
		type s struct {
			embA
			Own string `json:"own"`
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"name", "x", "own"}, slices.Collect(maps.Keys(got.Properties)))
		require.Equal(t, []string{"name", "x", "own"}, got.Required)
		requireSchemaMatchesEncoding(t, got, s{})
	})
	t.Run("two fields of a name at one depth hide each other", func(t *testing.T) {
		type s struct {
			embB
			embC
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"Y"}, slices.Collect(maps.Keys(got.Properties)))
		requireSchemaMatchesEncoding(t, got, s{})
	})
	t.Run("the shallower field wins", func(t *testing.T) {
		type s struct {
			embA
			Name int32 `json:"name"`
		}
		got := specOf[s](t)
		require.Equal(t, "integer", got.Properties["name"].Type)
		requireSchemaMatchesEncoding(t, got, s{})
	})
	t.Run("the deeper field loses", func(t *testing.T) {
		type s struct {
			embDeep
			embF
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"name", "x"}, slices.Collect(maps.Keys(got.Properties)))
		require.Equal(t, "boolean", got.Properties["name"].Type)
		requireSchemaMatchesEncoding(t, got, s{})
	})
	t.Run("the tagged field wins at one depth", func(t *testing.T) {
		type s struct {
			embC
			embD
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"Name"}, slices.Collect(maps.Keys(got.Properties)))
		requireSchemaMatchesEncoding(t, got, s{embD: embD{Tagged: "tagged"}})
		b, err := json.Marshal(s{embD: embD{Tagged: "tagged"}})
		require.NoError(t, err)
		require.JSONEq(t, `{"Name":"tagged"}`, string(b))
	})
	t.Run("a tagged embedded struct is a field", func(t *testing.T) {
		type s struct {
			embA `json:"a"`
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"a"}, slices.Collect(maps.Keys(got.Properties)))
		require.Equal(t, "object", got.Properties["a"].Type)
	})
	t.Run("an embedded non-struct is a field named by its type", func(t *testing.T) {
		type s struct{ embNamed }
		got := specOf[s](t)
		require.Empty(t, got.Properties, "embNamed is unexported, so encoding/json skips it")
		type t2 struct{ EmbName }
		require.Equal(t, apiextensionsv1.JSONSchemaProps{Type: "string"}, specOf[t2](t).Properties["EmbName"])
	})
	t.Run("an unexported embedded struct's exported fields are promoted", func(t *testing.T) {
		type s struct{ embUnexported }
		got := specOf[s](t)
		require.Contains(t, got.Properties, "promoted")
		requireSchemaMatchesEncoding(t, got, s{})
	})
	t.Run("fields promoted through an embedded pointer are optional", func(t *testing.T) {
		type s struct {
			*embA
			Own string `json:"own"`
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"name", "x", "own"}, slices.Collect(maps.Keys(got.Properties)))
		require.Equal(t, []string{"own"}, got.Required, "a nil embedded pointer leaves its fields out")
		requireSchemaMatchesEncoding(t, got, s{embA: &embA{}})
	})
	t.Run("a struct that embeds a pointer to itself", func(t *testing.T) {
		got := specOf[embSelf](t)
		require.ElementsMatch(t, []string{"z"}, slices.Collect(maps.Keys(got.Properties)))
	})
	t.Run("metav1.TypeMeta inline", func(t *testing.T) {
		type s struct {
			metav1.TypeMeta `json:",inline"`
		}
		got := specOf[s](t)
		require.ElementsMatch(t, []string{"kind", "apiVersion"}, slices.Collect(maps.Keys(got.Properties)))
		require.Empty(t, got.Required)
	})
}

// requireSchemaMatchesEncoding checks that encoding/json writes v with
// every required property of s, and only properties of s.
func requireSchemaMatchesEncoding(t *testing.T, s apiextensionsv1.JSONSchemaProps, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, r := range s.Required {
		require.Contains(t, m, r, "a required property encoding/json doesn't write")
	}
	for k := range m {
		require.Contains(t, s.Properties, k, "a property encoding/json writes that isn't in the schema")
	}
}

func TestSchemaOfTheEveryRowResource(t *testing.T) {
	crd, err := EveryRow.CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]

	require.Equal(t, []string{
		"owner", "bool", "int8", "int16", "int32", "uint8", "uint16", "int", "int64", "uint", "uint32", "uint64",
		"float32", "float64", "array", "window", "pointer",
	}, spec.Required, "required in field order, string and mode defaulted")
	require.NotContains(t, spec.Properties, "Skipped")
	require.NotContains(t, spec.Properties, "-")
	require.NotContains(t, spec.Properties, "unexported")
	require.Equal(t, "Who owns it, promoted from Base.", spec.Properties["owner"].Description)
	require.Equal(t, "Every row of the table.", spec.Description)
	require.Equal(t, colourSchema, spec.Properties["color"])

	full := EveryRowSpec{
		Base:      Base{Owner: "me", Labels: map[string]string{"a": "b"}},
		Bytes:     []byte("hi"),
		Slice:     []string{"a"},
		Map:       map[string]int64{"a": 1},
		Time:      metav1.Now(),
		Color:     Red,
		Mode:      "slow",
		Note:      "n",
		Tags:      []string{"t"},
		Raw:       runtime.RawExtension{Raw: []byte(`{"a":1}`)},
		Quantity:  resource.MustParse("1Gi"),
		Endpoints: []Endpoint{{Name: "a", Port: 1}},
	}
	requireSchemaMatchesEncoding(t, spec, full)
	requireSchemaMatchesEncoding(t, spec, EveryRowSpec{})
}

func TestSchemaErrorsNameEachBadType(t *testing.T) {
	type marshals struct{ Color }
	type badTypes struct {
		Iface   any                `json:"iface"`
		Chan    chan int           `json:"chan"`
		Func    func()             `json:"func"`
		IntKeys map[float32]string `json:"floatKeys"`
		Complex complex128         `json:"complex"`
		Unsafe  unsafe.Pointer     `json:"unsafe"`
		Color   Color              `json:"color"`
		InSlice []map[bool]string  `json:"inSlice"`
		Again   any                `json:"again"`
	}
	_, err := resourceOf[badTypes]().CRD()
	requireErrorsContain(t, err,
		"kube: spec.iface: interface {} is an interface, whose encoding has no schema: give the field that holds it PreserveUnknownFields",
		"kube: spec.chan: chan int is a channel",
		"kube: spec.func: func() is a function",
		"kube: spec.floatKeys: map[float32]string has keys of type float32, which encoding/json can't encode: a map's keys must be strings, integers, or implement encoding.TextMarshaler",
		"kube: spec.complex: complex128 is a complex128",
		"kube: spec.unsafe: unsafe.Pointer is a unsafe.Pointer",
		"kube: spec.color: kube_test.Color implements json.Marshaler, so its fields aren't its encoding: give its schema with kube.Schema[kube_test.Color], or give the field PreserveUnknownFields",
		"kube: spec.inSlice[*]: map[bool]string has keys of type bool",
	)
	require.NotContains(t, err.Error(), "spec.again", "a bad type is reported once")
}

type node struct {
	Value int32 `json:"value"`
	Next  *node `json:"next,omitempty"`
}

type tree struct {
	Children []tree `json:"children"`
}

type nested map[string]nested

type wrapsNode struct {
	Head node `json:"head"`
}

func TestSchemaErrorsOnATypeThatContainsItself(t *testing.T) {
	_, err := resourceOf[node]().CRD()
	requireErrorsContain(t, err, "kube: spec.next: kube_test.node contains itself, which a schema without $ref can't express")
	_, err = resourceOf[tree]().CRD()
	requireErrorsContain(t, err, "kube: spec.children[*]: kube_test.tree contains itself")
	_, err = resourceOf[one[nested]]().CRD()
	requireErrorsContain(t, err, "kube: spec.f[*]: kube_test.nested contains itself")
	_, err = resourceOf[wrapsNode]().CRD()
	requireErrorsContain(t, err, "kube: spec.head.next: kube_test.node contains itself")
}

// TestCRDNeverPanics tries odd types as Spec and Status: CRD returns a CRD
// or an error, and never panics.
func TestCRDNeverPanics(t *testing.T) {
	type (
		empty     struct{}
		zeroArray [0]int
		deep      []*[]map[string]*[2]*int
		recursive struct{ *recursive }
		funcs     struct {
			F func(chan any) `json:"f"`
		}
	)
	var n int
	var e empty
	for name, crd := range map[string]func() error{
		"int":                 func() error { _, err := resourceOf[int]().CRD(); return err },
		"*struct":             func() error { _, err := resourceOf[*Window]().CRD(); return err },
		"struct{}":            func() error { _, err := resourceOf[empty]().CRD(); return err },
		"[0]int":              func() error { _, err := resourceOf[zeroArray]().CRD(); return err },
		"map[string]any":      func() error { _, err := resourceOf[map[string]any]().CRD(); return err },
		"func":                func() error { _, err := resourceOf[func()]().CRD(); return err },
		"chan":                func() error { _, err := resourceOf[chan int]().CRD(); return err },
		"any":                 func() error { _, err := resourceOf[any]().CRD(); return err },
		"error":               func() error { _, err := resourceOf[error]().CRD(); return err },
		"unsafe.Pointer":      func() error { _, err := resourceOf[unsafe.Pointer]().CRD(); return err },
		"complex64":           func() error { _, err := resourceOf[complex64]().CRD(); return err },
		"deep":                func() error { _, err := resourceOf[deep]().CRD(); return err },
		"recursive embedding": func() error { _, err := resourceOf[recursive]().CRD(); return err },
		"funcs":               func() error { _, err := resourceOf[funcs]().CRD(); return err },
		"Rules on an int": func() error {
			_, err := resourceOf[int](kube.Rules(&n, kube.Field(&n).Minimum(1))).CRD()
			return err
		},
		"Rules on an empty struct": func() error {
			_, err := resourceOf[empty](kube.Rules(&e, kube.Field(&e))).CRD()
			return err
		},
		"Rules with a nil field": func() error {
			_, err := resourceOf[Window](kube.Rules(&window, nil)).CRD()
			return err
		},
		"a zero TypeRules": func() error {
			_, err := resourceOf[Window](kube.TypeRules{}).CRD()
			return err
		},
		"Status of pointers": func() error {
			_, err := kube.Resource[*int, **Window]{}.CRD()
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() { _ = crd() })
		})
	}
}

func TestSchemaOfANonStructSpec(t *testing.T) {
	crd, err := resourceOf[[]string]().CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	require.Equal(t, "array", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Type)
}
