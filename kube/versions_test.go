package kube_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/conversion"
)

// Two versions of a Widget: v2, the Resource's own version (the hub), has
// replicas and a color v1 lacks, where v1 has size.
type (
	WidgetSpec struct {
		Replicas int32  `json:"replicas"`
		Color    string `json:"color,omitempty"`
	}
	WidgetStatus struct {
		Ready int32 `json:"ready,omitempty"`
	}
	WidgetV1Spec struct {
		Size int32 `json:"size"`
	}
	WidgetV1Status struct {
		Ready int32 `json:"ready,omitempty"`
	}
	// WidgetV1beta1Spec encodes as WidgetSpec does.
	WidgetV1beta1Spec struct {
		Replicas int32  `json:"replicas"`
		Color    string `json:"color,omitempty"`
	}

	Widget        = kube.Object[WidgetSpec, WidgetStatus]
	WidgetV1      = kube.Object[WidgetV1Spec, WidgetV1Status]
	WidgetV1beta1 = kube.Object[WidgetV1beta1Spec, WidgetStatus]
)

func widgetV1ToV2(src *WidgetV1, dst *Widget) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Replicas = src.Spec.Size
	dst.Status.Ready = src.Status.Ready
	return nil
}

func widgetV2ToV1(src *Widget, dst *WidgetV1) error {
	dst.ObjectMeta = src.ObjectMeta
	dst.Spec.Size = src.Spec.Replicas
	dst.Status.Ready = src.Status.Ready
	return nil
}

var (
	wSpec   WidgetSpec
	wObj    Widget
	w1Spec  WidgetV1Spec
	w1Obj   WidgetV1
	w1bSpec WidgetV1beta1Spec
)

// widgets is a Resource of three versions: v2 its own, v1 converted by
// functions and deprecated, v1beta1 encoded alike.
func widgets() kube.Resource[WidgetSpec, WidgetStatus] {
	return kube.Resource[WidgetSpec, WidgetStatus]{
		Group: "example.com", Version: "v2", Kind: "Widget", Plural: "widgets", Scope: kube.Namespaced,
		Rules: []kube.TypeRules{kube.Rules(&wSpec, kube.Field(&wSpec.Replicas).Minimum(0).Maximum(10))},
		Columns: kube.Columns(&wObj,
			kube.PrinterColumn("Replicas", &wObj.Spec.Replicas),
			kube.PrinterColumn("Color", &wObj.Spec.Color)),
		SelectableFields: kube.SelectableFields(&wObj, kube.Field(&wObj.Spec.Color)),
		Description:      "A Widget, v2.",
		Versions: []kube.Version[WidgetSpec, WidgetStatus]{
			kube.NewVersion("v1", widgetV1ToV2, widgetV2ToV1, kube.VersionOptions{
				Deprecated: true, DeprecationWarning: "example.com/v1 Widget is deprecated; use v2",
				Rules:       []kube.TypeRules{kube.Rules(&w1Spec, kube.Field(&w1Spec.Size).Maximum(10))},
				Columns:     kube.Columns(&w1Obj, kube.PrinterColumn("Size", &w1Obj.Spec.Size)),
				Description: "A Widget, v1.",
				Preserving:  true,
			}),
			kube.NewVersion[WidgetV1beta1Spec, WidgetStatus, WidgetSpec, WidgetStatus]("v1beta1", nil, nil, kube.VersionOptions{
				NotServed: true,
				Rules:     []kube.TypeRules{kube.Rules(&w1bSpec, kube.Field(&w1bSpec.Color).Pattern(regexp.MustCompile(`^[a-z]+$`)))},
			}),
		},
		ConversionWebhook: kube.WebhookClient{Namespace: "widgets-system", Name: "widgets-webhooks"},
	}
}

// TestCRDOfVersions is the golden CRD of a Resource of three versions:
// each with its own schema, columns and selectable fields, served,
// stored and deprecated as declared, and a webhook conversion.
func TestCRDOfVersions(t *testing.T) {
	got, err := widgets().CRDYAML()
	require.NoError(t, err)
	const golden = "testdata/widgets.versions.crd.yaml"
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	crd, err := widgets().CRD()
	require.NoError(t, err)
	vs := crd.Spec.Versions
	require.Len(t, vs, 3)
	require.Equal(t, []string{"v2", "v1", "v1beta1"}, []string{vs[0].Name, vs[1].Name, vs[2].Name})
	require.True(t, vs[0].Served && vs[0].Storage && !vs[0].Deprecated)
	require.True(t, vs[1].Served && !vs[1].Storage && vs[1].Deprecated)
	require.Equal(t, "example.com/v1 Widget is deprecated; use v2", *vs[1].DeprecationWarning)
	require.True(t, !vs[2].Served && !vs[2].Storage)
	require.Contains(t, vs[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "replicas")
	require.Contains(t, vs[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "size")
	require.Equal(t, "A Widget, v1.", vs[1].Schema.OpenAPIV3Schema.Description)
	require.Equal(t, ".spec.size", vs[1].AdditionalPrinterColumns[0].JSONPath)
	require.Empty(t, vs[1].SelectableFields)
	require.Equal(t, ".spec.color", vs[0].SelectableFields[0].JSONPath)
	require.Equal(t, "^[a-z]+$", vs[2].Schema.OpenAPIV3Schema.Properties["spec"].Properties["color"].Pattern)

	conv := crd.Spec.Conversion
	require.Equal(t, apiextensionsv1.WebhookConverter, conv.Strategy)
	require.Equal(t, []string{"v1"}, conv.Webhook.ConversionReviewVersions)
	svc := conv.Webhook.ClientConfig.Service
	require.Equal(t, "widgets-system", svc.Namespace)
	require.Equal(t, "widgets-webhooks", svc.Name)
	require.Equal(t, int32(443), *svc.Port)
	require.Equal(t, conversion.Path, *svc.Path)
	require.Empty(t, conv.Webhook.ClientConfig.CABundle, "left for cert-manager or the App to fill")
}

// TestAVersionMayBeTheStorageVersion stores v1, and a URL and CA bundle
// are the client config.
func TestAVersionMayBeTheStorageVersion(t *testing.T) {
	r := widgets()
	r.Versions[0] = kube.NewVersion("v1", widgetV1ToV2, widgetV2ToV1, kube.VersionOptions{Storage: true})
	r.ConversionWebhook = kube.WebhookClient{URL: "https://127.0.0.1:9443/convert", CABundle: []byte("PEM")}
	require.Equal(t, "v1", r.StorageVersion())
	require.Equal(t, "v2", widgets().StorageVersion())
	crd, err := r.CRD()
	require.NoError(t, err)
	require.False(t, crd.Spec.Versions[0].Storage)
	require.True(t, crd.Spec.Versions[1].Storage)
	cc := crd.Spec.Conversion.Webhook.ClientConfig
	require.Equal(t, "https://127.0.0.1:9443/convert", *cc.URL)
	require.Nil(t, cc.Service)
	require.Equal(t, []byte("PEM"), cc.CABundle)
}

// TestVersionsThatEncodeAlikeNeedNoWebhook: with no conversion functions,
// the strategy is None, and no webhook is asked for.
func TestVersionsThatEncodeAlikeNeedNoWebhook(t *testing.T) {
	r := widgets()
	r.Versions = r.Versions[1:]
	r.ConversionWebhook = kube.WebhookClient{}
	crd, err := r.CRD()
	require.NoError(t, err)
	require.Equal(t, &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}, crd.Spec.Conversion)
	require.Len(t, crd.Spec.Versions, 2)

	r.ConversionWebhook = kube.WebhookClient{Namespace: "ns", Name: "svc"}
	_, err = r.CRD()
	require.ErrorContains(t, err, "kube: Resource.ConversionWebhook is set, but every version encodes as the hub does")
}

// TestAVersionWithoutFunctionsMustEncodeAlike: v1's spec has size, not
// replicas, so it can't be converted by changing the apiVersion.
func TestAVersionWithoutFunctionsMustEncodeAlike(t *testing.T) {
	r := widgets()
	r.Versions = []kube.Version[WidgetSpec, WidgetStatus]{kube.NewVersion[WidgetV1Spec, WidgetV1Status, WidgetSpec, WidgetStatus]("v1", nil, nil, kube.VersionOptions{})}
	r.ConversionWebhook = kube.WebhookClient{}
	_, err := r.CRD()
	require.EqualError(t, err, "kube: Resource.Versions[0] (v1, *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status]) has no conversion functions, so it must encode as the hub v2 does, but its Spec kube_test.WidgetV1Spec or Status kube_test.WidgetV1Status has other fields or types than v2's: give NewVersion its toHub and fromHub")
}

// TestVersionMistakesAreNamedInOneError: every mistake in the versions,
// each named, found before anything runs.
func TestVersionMistakesAreNamedInOneError(t *testing.T) {
	r := widgets()
	r.Versions = []kube.Version[WidgetSpec, WidgetStatus]{
		kube.NewVersion("v1", widgetV1ToV2, widgetV2ToV1, kube.VersionOptions{Storage: true, DeprecationWarning: "old"}),
		kube.NewVersion("v1", widgetV1ToV2, nil, kube.VersionOptions{Storage: true}),
		kube.NewVersion("v2", nil, widgetV2ToV1, kube.VersionOptions{}),
		kube.NewVersion("V_3", widgetV1ToV2, widgetV2ToV1, kube.VersionOptions{
			Columns: kube.Columns(&wObj, kube.PrinterColumn("Replicas", &wObj.Spec.Replicas)),
		}),
		{},
	}
	r.ConversionWebhook = kube.WebhookClient{URL: "http://example.com/convert?x=1", Name: "svc"}
	_, err := r.CRD()
	require.Error(t, err)
	var msgs []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		msgs = append(msgs, e.Error())
	}
	v1 := "(v1, *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status])"
	v2 := "(v2, *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status])"
	want := []string{
		"kube: Resource.Versions[0] " + v1 + " has a DeprecationWarning but isn't Deprecated: the API server warns only of a deprecated version",
		"kube: Resource.Versions[1] " + v1 + ": version v1 is declared twice, here and as Resource.Versions[0]",
		"kube: Resource.Versions[1] " + v1 + " has no conversion fromHub, from the hub v2: give both functions, or neither for a version that encodes as the hub does",
		"kube: Resource.Versions[2] " + v2 + ": version v2 is declared twice, here and as the Resource's own Version",
		"kube: Resource.Versions[2] " + v2 + " has no conversion toHub, to the hub v2: give both functions, or neither for a version that encodes as the hub does",
		"kube: Resource.Versions[3] (V_3, *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status]): the name \"V_3\" is not a version name, such as v1beta1: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
		"kube: Resource.Versions[3] (V_3, *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status]): Columns[0] \"Replicas\" names a field of a kube.Object[github.com/z5labs/humus/kube_test.WidgetSpec,github.com/z5labs/humus/kube_test.WidgetStatus], not of the resource's kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status]: give Columns a *kube.Object[github.com/z5labs/humus/kube_test.WidgetV1Spec,github.com/z5labs/humus/kube_test.WidgetV1Status]",
		"kube: Resource.Versions[4] is a zero Version: make it with kube.NewVersion",
		"kube: Resource.Versions: v1 and v1 are each Storage: one version is stored, at most one of Versions (the Resource's own Version when none is)",
		"kube: Resource.ConversionWebhook has a URL and a Service (Namespace, Name, Port, Path): give one",
	}
	require.Equal(t, want, msgs)

	// NewController reports them too, before anything runs.
	_, err = kube.NewController(&humus.Setup{}, nil, kube.Settings{}, r, nil)
	require.ErrorContains(t, err, "version v1 is declared twice")
}

// TestTheSingleVersionCRDHasNoConversion: a Resource without Versions is
// what it was, one version and no spec.conversion. (The checks of the
// versions and the webhook's client are internal/crdversions' tests.)
func TestTheSingleVersionCRDHasNoConversion(t *testing.T) {
	r := widgets()
	r.Versions, r.ConversionWebhook = nil, kube.WebhookClient{}
	crd, err := r.CRD()
	require.NoError(t, err)
	require.Nil(t, crd.Spec.Conversion)
	require.Len(t, crd.Spec.Versions, 1)
	require.True(t, crd.Spec.Versions[0].Storage)

	// A ConversionWebhook alone is a resource of versions, without any.
	r.ConversionWebhook = kube.WebhookClient{URL: "https://h/convert"}
	_, err = r.CRD()
	require.EqualError(t, err, "kube: Resource.ConversionWebhook is set, but the Resource has no Versions to convert")
}

// TestConversionServesTheResourcesVersions: Resource.Conversion is what
// conversion.Handler serves, with no redeclaration, and RoundTrip passes
// it (v1 is Preserving, so v2's color survives v1).
func TestConversionServesTheResourcesVersions(t *testing.T) {
	r := widgets()
	require.NoError(t, conversion.RoundTrip(r.Conversion(), conversion.RoundTripOptions{}))

	tel := humustest.NewTelemetry(t)
	h, err := conversion.Handler(&humus.Setup{Telemetry: tel.Telemetry}, r.Conversion())
	require.NoError(t, err)
	hub := Widget{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v2", Kind: "Widget"}, ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "u1"}, Spec: WidgetSpec{Replicas: 3, Color: "blue"}}
	atV1 := convert(t, h, "example.com/v1", hub)
	var v1 WidgetV1
	require.NoError(t, json.Unmarshal(atV1, &v1))
	require.Equal(t, int32(3), v1.Spec.Size)
	require.Contains(t, v1.Annotations, conversion.PreservedAnnotation, "v2's color kept through v1")

	v1.Spec.Size = 4 // a write through v1
	back := convert(t, h, "example.com/v2", v1)
	var got Widget
	require.NoError(t, json.Unmarshal(back, &got))
	require.Equal(t, WidgetSpec{Replicas: 4, Color: "blue"}, got.Spec)

	atV1beta1 := convert(t, h, "example.com/v1beta1", hub)
	var b WidgetV1beta1
	require.NoError(t, json.Unmarshal(atV1beta1, &b))
	require.Equal(t, WidgetV1beta1Spec{Replicas: 3, Color: "blue"}, b.Spec, "converted through JSON")
}

// TestConversionOfAResourceWithAMissingDirectionFailsInHandler: Handler
// names what CRD names.
func TestConversionOfAResourceWithAMissingDirectionFailsInHandler(t *testing.T) {
	r := widgets()
	r.Versions[0] = kube.NewVersion("v1", widgetV1ToV2, nil, kube.VersionOptions{})
	_, err := conversion.Handler(&humus.Setup{}, r.Conversion())
	require.ErrorContains(t, err, "has no conversion from the hub v2")
}

// TestConversionOfAZeroVersionIsNamedAsCRDNamesIt: a zero Version in
// Resource.Versions is named by its place there and kube.NewVersion, not
// as a zero conversion.Spoke.
func TestConversionOfAZeroVersionIsNamedAsCRDNamesIt(t *testing.T) {
	r := widgets()
	r.Versions = append(r.Versions, kube.Version[WidgetSpec, WidgetStatus]{})
	at := len(r.Versions) - 1
	want := fmt.Sprintf("kube: Resource.Versions[%d] is a zero Version: make it with kube.NewVersion", at)
	_, err := conversion.Handler(&humus.Setup{}, r.Conversion())
	require.ErrorContains(t, err, want)
	require.NotContains(t, err.Error(), "Spoke")
	require.ErrorContains(t, conversion.RoundTrip(r.Conversion(), conversion.RoundTripOptions{}), want)
}

// convert posts a ConversionReview of obj to h and returns its one
// converted object.
func convert(t *testing.T, h http.Handler, desired string, obj any) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	body, err := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: desired, Objects: []runtime.RawExtension{{Raw: raw}}},
	})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, conversion.Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var rev apiextensionsv1.ConversionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rev))
	if rev.Response.Result.Status != metav1.StatusSuccess {
		require.NoError(t, errors.New(rev.Response.Result.Message))
	}
	require.Len(t, rev.Response.ConvertedObjects, 1)
	return rev.Response.ConvertedObjects[0].Raw
}
