package kube_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/version"
	openapispec "k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/z5labs/humus/kube"
)

type fenced struct {
	Count  int32             `json:"count"`
	Ratio  float64           `json:"ratio"`
	Name   string            `json:"name"`
	Mode   string            `json:"mode"`
	Items  []string          `json:"items"`
	Labels map[string]string `json:"labels"`
}

type grade int32

type grades struct {
	Level grade   `json:"grade"`
	Each  []grade `json:"each"`
}

func TestCRDRefusesConstraintsThatNoValueCanPass(t *testing.T) {
	var b fenced
	_, err := resourceOf[fenced](kube.Rules(&b,
		kube.Field(&b.Count).Minimum(10).Maximum(5),
		kube.Field(&b.Ratio).ExclusiveMinimum(1).ExclusiveMaximum(1),
		kube.Field(&b.Name).MinLength(8).MaxLength(4),
		kube.Field(&b.Items).MinItems(3).MaxItems(2),
		kube.Field(&b.Labels).MinProperties(2).MaxProperties(1),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: spec.count: Minimum 10 and Maximum 5 leave no value",
		"kube: spec.ratio: ExclusiveMinimum 1 and ExclusiveMaximum 1 leave no value",
		"kube: spec.name: MinLength 8 is greater than MaxLength 4",
		"kube: spec.items: MinItems 3 is greater than MaxItems 2",
		"kube: spec.labels: MinProperties 2 is greater than MaxProperties 1",
	)

	_, err = resourceOf[grades](kube.ValueRules(kube.Values[grade]().Minimum(3).Maximum(1))).CRD()
	requireErrorsContain(t, err, "kube: spec.grade: ValueRules for kube_test.grade: Minimum 3 and Maximum 1 leave no value")

	var l grades
	_, err = resourceOf[grades](kube.Rules(&l, kube.Items(kube.Field(&l.Each), kube.Values[grade]().MinLength(0).Minimum(5).Maximum(2)))).CRD()
	requireErrorsContain(t, err, "kube: spec.each: its items: Minimum 5 and Maximum 2 leave no value")
}

func TestCRDRefusesADefaultItsConstraintsRefuse(t *testing.T) {
	var b fenced
	_, err := resourceOf[fenced](kube.Rules(&b,
		kube.Field(&b.Count).Minimum(1).Maximum(10).Default(12),
		kube.Field(&b.Ratio).MultipleOf(0.5).Default(0.7),
		kube.Field(&b.Name).Pattern(regexp.MustCompile(`^[a-z]+$`)).MaxLength(3).Default("Abcd"),
		kube.Field(&b.Mode).Enum("fast", "slow").Default("medium"),
		kube.Field(&b.Items).MinItems(1).Default([]string{}),
		kube.Field(&b.Labels).MaxProperties(1).Default(map[string]string{"a": "1", "b": "2"}),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: spec.count: Default 12 breaks the field's own Maximum 10",
		"kube: spec.ratio: Default 0.7 breaks the field's own MultipleOf 0.5",
		"kube: spec.name: Default \"Abcd\" breaks the field's own MaxLength 3 and Pattern ^[a-z]+$",
		"kube: spec.mode: Default \"medium\" breaks the field's own Enum",
		"kube: spec.items: Default [] breaks the field's own MinItems 1",
		"kube: spec.labels: Default {\"a\":\"1\",\"b\":\"2\"} breaks the field's own MaxProperties 1",
	)

	// Defaults within their constraints pass, and the API server agrees.
	crd, err := resourceOf[fenced](kube.Rules(&b,
		kube.Field(&b.Count).Minimum(1).Maximum(10).Default(10),
		kube.Field(&b.Ratio).MultipleOf(0.5).Default(1.5),
		kube.Field(&b.Name).Pattern(regexp.MustCompile(`^[a-z]+$`)).MaxLength(3).Default("abc"),
		kube.Field(&b.Mode).Enum("fast", "slow").Default("slow"),
	)).CRD()
	require.NoError(t, err)
	requireServerValid(t, crd)
}

func TestCRDRefusesAFormatTheAPIServerDoesntKnow(t *testing.T) {
	var b fenced
	_, err := resourceOf[fenced](kube.Rules(&b, kube.Field(&b.Name).Format("hostnames"))).CRD()
	requireErrorsContain(t, err, `kube: spec.name: Rules for kube_test.fenced: fenced.Name: Format is "hostnames", which the API server doesn't know`)
}

// TestKubesFormatsAreTheAPIServers checks kube's Format constants against
// the API server's own list (k8s.io/apiextensions-apiserver's
// pkg/apiserver/validation): each is known to the release in go.mod, and a
// name that isn't a format isn't.
func TestKubesFormatsAreTheAPIServers(t *testing.T) {
	unknown := func(f kube.Format) []string {
		return validation.GetUnrecognizedFormats(&openapispec.Schema{SchemaProps: openapispec.SchemaProps{Type: []string{"string"}, Format: string(f)}}, version.MajorMinor(1, 37))
	}
	for _, f := range []kube.Format{
		kube.FormatBSONObjectID, kube.FormatURI, kube.FormatEmail, kube.FormatHostname, kube.FormatIPv4, kube.FormatIPv6,
		kube.FormatCIDR, kube.FormatMAC, kube.FormatUUID, kube.FormatUUID3, kube.FormatUUID4, kube.FormatUUID5,
		kube.FormatISBN, kube.FormatISBN10, kube.FormatISBN13, kube.FormatCreditCard, kube.FormatSSN, kube.FormatHexColor,
		kube.FormatRGBColor, kube.FormatByte, kube.FormatPassword, kube.FormatDate, kube.FormatDuration, kube.FormatDateTime,
		kube.FormatK8sShortName, kube.FormatK8sLongName,
	} {
		require.Empty(t, unknown(f), "format %s", f)
		var b fenced
		_, err := resourceOf[fenced](kube.Rules(&b, kube.Field(&b.Name).Format(f))).CRD()
		require.NoError(t, err, "format %s", f)
	}
	require.NotEmpty(t, unknown("hostnames"))
}

func TestCRDRefusesTwoFieldRulesThatConflict(t *testing.T) {
	var b fenced
	_, err := resourceOf[fenced](kube.Rules(&b,
		kube.Field(&b.Count).Minimum(1).Description("how many"),
		kube.Field(&b.Count).Minimum(2).Maximum(9),
		kube.Field(&b.Name).Required(),
		kube.Field(&b.Name).Optional(),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: spec.count: Rules for kube_test.fenced: two Field rules for fenced.Count conflict, setting minimum 1 and 2",
		"kube: spec.name: Rules for kube_test.fenced: two Field rules for fenced.Name conflict, setting Required and Optional",
	)

	// Two rules for one field that add to each other don't conflict.
	got := specOf[fenced](t, kube.Rules(&b,
		kube.Field(&b.Count).Minimum(1),
		kube.Field(&b.Count).Maximum(9).Description("how many"),
	))
	require.Equal(t, ptr(1.0), got.Properties["count"].Minimum)
	require.Equal(t, ptr(9.0), got.Properties["count"].Maximum)
}

type nullables struct {
	Size  *int32   `json:"size,omitempty"`
	Pair  []string `json:"pair"`
	Other *int32   `json:"other,omitempty"`
}

func TestCRDRefusesRequiredAndNullableOnOneField(t *testing.T) {
	// Required promises that a null is refused; with Nullable too, the
	// CRD let {"size": null} through.
	var n nullables
	_, err := resourceOf[nullables](kube.Rules(&n,
		kube.Field(&n.Size).Nullable().Required(),
	)).CRD()
	require.EqualError(t, err, "kube: spec.size: Rules for kube_test.nullables: nullables.Size: Required and Nullable contradict: a Required field refuses a null, which Nullable lets in; drop one of them (a field required by its json tag alone may be Nullable: present, and maybe null)")

	// A field its json tag requires may be Nullable: present, maybe null.
	got := specOf[nullables](t, kube.Rules(&n, kube.Field(&n.Pair).Nullable()))
	require.Contains(t, got.Required, "pair")
	require.True(t, got.Properties["pair"].Nullable)
	// An Optional field may be Nullable.
	got = specOf[nullables](t, kube.Rules(&n, kube.Field(&n.Other).Optional().Nullable()))
	require.True(t, got.Properties["other"].Nullable)
}

func TestCRDRefusesAnEnumValueItsOwnConstraintsRefuse(t *testing.T) {
	// Enum(5, 6).Maximum(3) left no value at all, and both CRD() and the
	// API server took it: every object was then refused.
	var b fenced
	_, err := resourceOf[fenced](kube.Rules(&b,
		kube.Field(&b.Count).Enum(2, 5, 6).Maximum(3),
		kube.Field(&b.Mode).Enum("fast", "slowest").MaxLength(4),
	)).CRD()
	requireErrorsContain(t, err,
		"kube: spec.count: Enum value 5 breaks the field's own Maximum 3, so no object can hold it: drop the value, or loosen the constraint",
		"kube: spec.count: Enum value 6 breaks the field's own Maximum 3",
		`kube: spec.mode: Enum value "slowest" breaks the field's own MaxLength 4`,
	)
	require.NotContains(t, err.Error(), "Enum value 2")
	require.NotContains(t, err.Error(), `"fast"`)

	// Values its constraints accept are fine.
	got := specOf[fenced](t, kube.Rules(&b, kube.Field(&b.Count).Enum(1, 3).Minimum(1).Maximum(3)))
	require.Len(t, got.Properties["count"].Enum, 2)
}
