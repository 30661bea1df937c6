package kube_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/z5labs/humus/kube"
)

// serverObjectErrors is what the API server's own code makes of an object
// of crd whose spec encodes as encoding/json encodes spec: every field it
// prunes (which the server would drop silently, or refuse under
// fieldValidation=Strict), and every error of the schema's validation,
// after it drops the nulls it may not keep and fills in the defaults, as
// the API server does when an object is created.
func serverObjectErrors(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, spec any) []string {
	t.Helper()
	v1 := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1)
	var internal apiextensions.CustomResourceDefinition
	require.NoError(t, apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1, &internal, nil))
	// One version's schema is the CRD's whole in the internal version.
	props := internal.Spec.Validation.OpenAPIV3Schema
	ss, err := structuralschema.NewStructural(props)
	require.NoError(t, err)

	raw, err := json.Marshal(map[string]any{
		"apiVersion": crd.Spec.Group + "/" + crd.Spec.Versions[0].Name,
		"kind":       crd.Spec.Names.Kind,
		"metadata":   map[string]any{"name": "x"},
		"spec":       spec,
	})
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(raw, &obj))

	var out []string
	for _, p := range pruning.PruneWithOptions(obj, ss, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}) {
		out = append(out, "pruned "+p)
	}
	defaulting.PruneNonNullableNullsWithoutDefaults(obj, ss)
	defaulting.Default(obj, ss)
	validator, _, err := apiservervalidation.NewSchemaValidator(props)
	require.NoError(t, err)
	for _, e := range apiservervalidation.ValidateCustomResource(nil, obj, validator) {
		out = append(out, e.Error())
	}
	return out
}

// requireServerAccepts checks that the API server's code keeps and accepts
// an object whose spec is what encoding/json makes of spec.
func requireServerAccepts(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, spec any) {
	t.Helper()
	require.Empty(t, serverObjectErrors(t, crd, spec), "the API server's pruning and validation of %#v", spec)
}

// quotedSpec has fields tagged ",string", which encoding/json writes as
// strings, and a nil pointer among them as null.
type quotedSpec struct {
	Replicas int32   `json:"replicas,string"`
	Ratio    float64 `json:"ratio,string,omitempty"`
	On       bool    `json:"on,string,omitempty"`
	Name     string  `json:"name,string,omitempty"`
	Max      *int32  `json:"max,string"`
}

var quoted quotedSpec

func TestAFieldTaggedStringIsKeptByTheAPIServerWhateverItsValue(t *testing.T) {
	crd, err := resourceOf[quotedSpec](kube.Rules(&quoted,
		kube.Field(&quoted.Replicas).Default(3).Enum(1, 3),
		kube.Field(&quoted.Ratio).Default(0.5),
		kube.Field(&quoted.On).Enum(true),
		kube.Field(&quoted.Name).Default("a"),
	)).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	require.Equal(t, `"3"`, string(spec.Properties["replicas"].Default.Raw))
	require.Equal(t, `"\"a\""`, string(spec.Properties["name"].Default.Raw))
	require.True(t, spec.Properties["max"].Nullable, "a nil *int32 tagged \",string\" is written as null")

	requireServerAccepts(t, crd, quotedSpec{Replicas: 1})
	requireServerAccepts(t, crd, quotedSpec{Replicas: 3, Ratio: 1.5, On: true, Name: "b", Max: ptr[int32](7)})
	require.NotEmpty(t, serverObjectErrors(t, crd, quotedSpec{Replicas: 2}), "the Enum still holds")
}

type bounded struct {
	F float64 `json:"f"`
}

var bnd bounded

func TestAMinimumOrMaximumJSONCantEncodeIsAnError(t *testing.T) {
	_, err := resourceOf[bounded](kube.Rules(&bnd, kube.Field(&bnd.F).Minimum(math.NaN()).Maximum(math.Inf(1)))).CRD()
	requireErrorsContain(t, err,
		"kube: spec.f: Rules for kube_test.bounded: bounded.F: Minimum is NaN, which JSON can't encode",
		"kube: spec.f: Rules for kube_test.bounded: bounded.F: Maximum is +Inf, which JSON can't encode",
	)
}

// level encodes itself as a number, with or without ",string".
type level int

func (l level) MarshalJSON() ([]byte, error) { return json.Marshal(int(l) * 10) }

func TestStringIsIgnoredOnATypeThatEncodesItself(t *testing.T) {
	type s struct {
		Level level `json:"level,string"`
	}
	_, err := resourceOf[s]().CRD()
	require.ErrorContains(t, err, "kube_test.level implements json.Marshaler", "encoding/json ignores ,string on it, so it needs a Schema")

	crd, err := resourceOf[s](kube.Schema[level](apiextensionsv1.JSONSchemaProps{Type: "integer"})).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	requireServerAccepts(t, crd, s{Level: 2})
}

// nulls has fields that encoding/json writes as null when they are nil,
// with and without constraints on their values.
type nulls struct {
	Pair     []string          `json:"pair"`
	Free     []string          `json:"free"`
	Mode     *string           `json:"mode"`
	Labels   map[string]string `json:"labels"`
	Must     []string          `json:"must,omitempty"`
	Optional *string           `json:"optional,omitempty"`
	Nullable []string          `json:"nullable"`
	Phases   []phase           `json:"phases"`
}

type phase string

var nl nulls

// nullRules constrain nulls' fields, but for Free, and Labels, which only
// has a Description.
func nullRules() []kube.TypeRules {
	slow := "slow"
	return []kube.TypeRules{kube.Rules(&nl,
		kube.Field(&nl.Pair).MinItems(2),
		kube.Field(&nl.Mode).Enum(&slow),
		kube.Field(&nl.Labels).Description("labels"),
		kube.Field(&nl.Must).Required(),
		kube.Field(&nl.Optional).Enum(&slow),
		kube.Field(&nl.Nullable).MinItems(1).Nullable(),
	), kube.ValueRules(kube.Values[phase]().Enum("a", "b"))}
}

// TestAConstrainedFieldIsNotNullable: null would pass a field's
// constraints, which the API server skips for a null, so a field with a
// constraint on its value, or Required, isn't nullable: the API server
// drops the null and finds the required field missing. An unconstrained
// one keeps the null a Go client's nil slice, map or pointer is written as.
func TestAConstrainedFieldIsNotNullable(t *testing.T) {
	crd, err := resourceOf[nulls](nullRules()...).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	for name, want := range map[string]bool{
		"pair": false, "mode": false, "must": false, "optional": false,
		"free": true, "labels": true, "nullable": true, "phases": true,
	} {
		require.Equal(t, want, spec.Properties[name].Nullable, name)
	}
	require.False(t, spec.Properties["phases"].Items.Schema.Nullable)
	require.Equal(t, []string{"pair", "free", "mode", "labels", "must", "nullable", "phases"}, spec.Required)

	// What the API server makes of nulls: refused where constrained, kept
	// where not.
	got := serverObjectErrors(t, crd, map[string]any{"pair": nil, "free": nil, "mode": nil, "labels": nil, "must": nil, "nullable": nil, "phases": nil})
	require.ElementsMatch(t, []string{"spec.pair: Required value", "spec.mode: Required value", "spec.must: Required value"}, got)
	require.Empty(t, serverObjectErrors(t, crd, map[string]any{"pair": []string{"a", "b"}, "free": nil, "mode": "slow", "labels": nil, "must": []string{}, "nullable": nil, "phases": nil}))
	require.Contains(t, serverObjectErrors(t, crd, map[string]any{"pair": []string{"a"}, "free": nil, "mode": "slow", "labels": nil, "must": []string{}, "nullable": nil, "phases": []string{"c"}}),
		`spec.phases[0]: Unsupported value: "c": supported values: "a", "b"`)

	// Before, a nullable Pair let null pass required and MinItems.
	pair := spec.Properties["pair"]
	pair.Nullable = true
	spec.Properties["pair"] = pair
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	require.Empty(t, serverObjectErrors(t, crd, map[string]any{"pair": nil, "free": nil, "mode": "slow", "labels": nil, "must": []string{}, "nullable": nil, "phases": nil}))
}

// embeddedCondition embeds metav1.Condition, as operators often extend it.
type embeddedCondition struct {
	metav1.Condition `json:",inline"`
	Severity         string `json:"severity,omitempty"`
}

type zeroTimes struct {
	OmitEmpty    metav1.Time          `json:"omitEmpty,omitempty"`
	OmitZero     metav1.Time          `json:"omitZero,omitzero"`
	PtrOmitEmpty *metav1.Time         `json:"ptrOmitEmpty,omitempty"`
	PtrOmitZero  *metav1.Time         `json:"ptrOmitZero,omitzero"`
	Micro        metav1.MicroTime     `json:"micro,omitempty"`
	Raw          runtime.RawExtension `json:"raw,omitempty"`
	Conds        []embeddedCondition  `json:"conds"`
}

// TestZeroTimesAreKeptWhereEncodingJSONWritesThem: omitempty never leaves
// out a struct, so a zero metav1.Time, MicroTime or RawExtension tagged
// omitempty, or a pointer to one, is written as null, and must be nullable;
// omitzero leaves it out. A metav1.Condition's lastTransitionTime stays
// required, embedded too.
func TestZeroTimesAreKeptWhereEncodingJSONWritesThem(t *testing.T) {
	crd, err := resourceOf[zeroTimes]().CRD()
	require.NoError(t, err)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	nullable := map[string]bool{}
	for name, p := range spec.Properties {
		nullable[name] = p.Nullable
	}
	require.Equal(t, map[string]bool{
		"omitEmpty": true, "omitZero": false, "ptrOmitEmpty": true, "ptrOmitZero": false,
		"micro": true, "raw": true, "conds": true,
	}, nullable)
	require.Equal(t, []string{"conds"}, spec.Required)
	item := spec.Properties["conds"].Items.Schema
	require.False(t, item.Properties["lastTransitionTime"].Nullable)
	require.Contains(t, item.Required, "lastTransitionTime")

	zero := metav1.Time{}
	requireServerAccepts(t, crd, zeroTimes{PtrOmitEmpty: &zero, PtrOmitZero: &zero, Conds: []embeddedCondition{}})
	c := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R", Message: "m"}
	require.Equal(t, []string{"spec.conds[0].lastTransitionTime: Required value"},
		serverObjectErrors(t, crd, zeroTimes{Conds: []embeddedCondition{{Condition: c}}}))
}
