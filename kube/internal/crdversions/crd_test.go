package crdversions

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/z5labs/humus/kube/conversion"
	"github.com/z5labs/humus/kube/internal/crdschema"
)

// object is kube.Object's encoding, of a version's Spec and Status.
type object[Spec, Status any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec"`
	Status Status `json:"status,omitempty"`
}

// Two versions of a Widget: v2, the hub, has replicas and a color v1
// lacks, where v1 has size; v1beta1 encodes as v2 does.
type (
	widgetSpec struct {
		Replicas int32  `json:"replicas"`
		Color    string `json:"color,omitempty"`
	}
	widgetStatus struct {
		Ready int32 `json:"ready,omitempty"`
	}
	widgetV1Spec struct {
		Size int32 `json:"size"`
	}
	widgetV1beta1Spec struct {
		Replicas int32  `json:"replicas"`
		Color    string `json:"color,omitempty"`
	}
)

// version is the Version NewVersion makes of Spec and Status, with or
// without conversion functions.
func version[Spec, Status any](name string, functions bool) Version {
	return Version{
		Made: true, Name: name, GoType: reflect.TypeFor[*object[Spec, Status]]().String(),
		ToNil: !functions, FromNil: !functions, Identity: !functions,
		Spec: reflect.TypeFor[Spec](), Status: reflect.TypeFor[Status](), Object: reflect.TypeFor[object[Spec, Status]](),
	}
}

// widgets is a Resource of three versions: v2 its own, v1 converted by
// functions and deprecated, v1beta1 encoded alike and not served.
func widgets() Resource {
	v1 := version[widgetV1Spec, widgetStatus]("v1", true)
	v1.Deprecated, v1.DeprecationWarning = true, "example.com/v1 Widget is deprecated; use v2"
	v1beta1 := version[widgetV1beta1Spec, widgetStatus]("v1beta1", false)
	v1beta1.NotServed = true
	return Resource{
		Hub: crdschema.Resource{
			Group: "example.com", Version: "v2", Kind: "Widget", Plural: "widgets", Scope: "Namespaced",
			Spec: reflect.TypeFor[widgetSpec](), Status: reflect.TypeFor[widgetStatus](), Object: reflect.TypeFor[object[widgetSpec, widgetStatus]](),
		},
		Versions: []Version{v1, v1beta1},
		Webhook:  WebhookClient{Namespace: "widgets-system", Name: "widgets-webhooks"},
	}
}

func TestCRDOfVersions(t *testing.T) {
	crd, err := CRD(widgets())
	require.NoError(t, err)
	vs := crd.Spec.Versions
	require.Equal(t, []string{"v2", "v1", "v1beta1"}, []string{vs[0].Name, vs[1].Name, vs[2].Name})
	require.True(t, vs[0].Served && vs[0].Storage && !vs[0].Deprecated)
	require.True(t, vs[1].Served && !vs[1].Storage && vs[1].Deprecated)
	require.Equal(t, "example.com/v1 Widget is deprecated; use v2", *vs[1].DeprecationWarning)
	require.True(t, !vs[2].Served && !vs[2].Storage)
	require.Contains(t, vs[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "size")

	conv := crd.Spec.Conversion
	require.Equal(t, apiextensionsv1.WebhookConverter, conv.Strategy)
	require.Equal(t, []string{"v1"}, conv.Webhook.ConversionReviewVersions)
	svc := conv.Webhook.ClientConfig.Service
	require.Equal(t, "widgets-system", svc.Namespace)
	require.Equal(t, int32(443), *svc.Port)
	require.Equal(t, conversion.Path, *svc.Path)
}

// TestAVersionMayBeTheStorageVersion stores v1, not the hub.
func TestAVersionMayBeTheStorageVersion(t *testing.T) {
	r := widgets()
	r.Versions[0].Storage = true
	crd, err := CRD(r)
	require.NoError(t, err)
	require.False(t, crd.Spec.Versions[0].Storage)
	require.True(t, crd.Spec.Versions[1].Storage)
}

// TestVersionsThatEncodeAlikeNeedNoWebhook: with no conversion functions,
// the strategy is None, and no webhook is asked for.
func TestVersionsThatEncodeAlikeNeedNoWebhook(t *testing.T) {
	r := widgets()
	r.Versions = r.Versions[1:]
	r.Webhook = WebhookClient{}
	crd, err := CRD(r)
	require.NoError(t, err)
	require.Equal(t, &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}, crd.Spec.Conversion)

	r.Webhook = WebhookClient{Namespace: "ns", Name: "svc"}
	_, err = CRD(r)
	require.ErrorContains(t, err, "kube: Resource.ConversionWebhook is set, but every version encodes as the hub does")

	r.Versions = []Version{version[widgetV1Spec, widgetStatus]("v1", false)}
	r.Webhook = WebhookClient{}
	_, err = CRD(r)
	require.ErrorContains(t, err, "has no conversion functions, so it must encode as the hub v2 does")
}

// TestAWebhookClientIsCheckedAsTheAPIServerChecksIt names each mistake of
// a URL or a Service.
func TestAWebhookClientIsCheckedAsTheAPIServerChecksIt(t *testing.T) {
	for _, tc := range []struct {
		w    WebhookClient
		want string
	}{
		{WebhookClient{}, "kube: Resource.ConversionWebhook is missing: Versions convert through a webhook, so name the Service in front of the App's webhook server (Namespace and Name), or a URL"},
		{WebhookClient{URL: "http://127.0.0.1/convert"}, `kube: Resource.ConversionWebhook.URL "http://127.0.0.1/convert": the scheme must be https`},
		{WebhookClient{URL: "https:///convert"}, `kube: Resource.ConversionWebhook.URL "https:///convert": it has no host`},
		{WebhookClient{URL: "https://u@h/convert#x"}, `kube: Resource.ConversionWebhook.URL "https://u@h/convert#x": it may have no user, query or fragment`},
		{WebhookClient{Name: "svc"}, "kube: Resource.ConversionWebhook.Namespace is missing: give the Service's namespace"},
		{WebhookClient{Namespace: "ns", Port: 70000, Path: "convert"}, "kube: Resource.ConversionWebhook.Name is missing: name the Service in front of the App's webhook server\n" +
			"kube: Resource.ConversionWebhook.Port 70000: must be from 1 to 65535\n" +
			`kube: Resource.ConversionWebhook.Path "convert": must start with /`},
		{WebhookClient{Namespace: "NS", Name: "Svc"}, `kube: Resource.ConversionWebhook.Name "Svc": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')` + "\n" +
			`kube: Resource.ConversionWebhook.Namespace "NS": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
	} {
		r := widgets()
		r.Webhook = tc.w
		_, err := CRD(r)
		require.EqualError(t, err, tc.want)
	}
	r := widgets()
	r.Versions = nil
	r.Webhook = WebhookClient{URL: "https://h/convert"}
	_, err := CRD(r)
	require.EqualError(t, err, "kube: Resource.ConversionWebhook is set, but the Resource has no Versions to convert")
}

// TestEveryMistakeInAWebhookURLIsNamed: a URL of the wrong scheme, with no
// host and with a user, query and fragment has each named, not the first
// alone.
func TestEveryMistakeInAWebhookURLIsNamed(t *testing.T) {
	r := widgets()
	r.Webhook = WebhookClient{URL: "http://user@/convert?a=b#f"}
	_, err := CRD(r)
	require.Error(t, err)
	for _, want := range []string{"the scheme must be https", "it has no host", "it may have no user, query or fragment"} {
		require.ErrorContains(t, err, want)
	}
}

// TestADeprecationWarningIsCheckedAsTheAPIServerChecksIt: at most 256
// printable characters, and only of a Deprecated version.
func TestADeprecationWarningIsCheckedAsTheAPIServerChecksIt(t *testing.T) {
	r := widgets()
	r.Versions = r.Versions[:1]
	r.Versions[0].DeprecationWarning = strings.Repeat("x", 256) + "\n"
	at := "kube: Resource.Versions[0] (v1, " + r.Versions[0].GoType + ")"
	_, err := CRD(r)
	require.EqualError(t, err, at+": its DeprecationWarning is 257 bytes, more than 256\n"+
		at+`: its DeprecationWarning "`+strings.Repeat("x", 256)+`\n" has characters that are not printable`)

	r.Versions[0].Deprecated = false
	r.Versions[0].DeprecationWarning = "old"
	_, err = CRD(r)
	require.EqualError(t, err, at+" has a DeprecationWarning but isn't Deprecated: the API server warns only of a deprecated version")
}

// TestVersionMistakesAreNamedInOneError: every mistake in the versions,
// each named by its place.
func TestVersionMistakesAreNamedInOneError(t *testing.T) {
	r := widgets()
	v1 := version[widgetV1Spec, widgetStatus]("v1", true)
	v1.Storage = true
	noFrom := v1
	noFrom.FromNil = true
	v2 := version[widgetV1Spec, widgetStatus]("v2", true)
	v2.ToNil = true
	r.Versions = []Version{v1, noFrom, v2, version[widgetV1Spec, widgetStatus]("V_3", true), {}}
	r.Webhook = WebhookClient{URL: "https://h/convert", Name: "svc"}
	_, err := CRD(r)
	require.Error(t, err)
	var msgs []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		msgs = append(msgs, e.Error())
	}
	at := func(i int, name string) string {
		return "kube: Resource.Versions[" + string(rune('0'+i)) + "] (" + name + ", " + v1.GoType + ")"
	}
	require.Equal(t, []string{
		at(1, "v1") + ": version v1 is declared twice, here and as Resource.Versions[0]",
		at(1, "v1") + " has no conversion fromHub, from the hub v2: give both functions, or neither for a version that encodes as the hub does",
		at(2, "v2") + ": version v2 is declared twice, here and as the Resource's own Version",
		at(2, "v2") + " has no conversion toHub, to the hub v2: give both functions, or neither for a version that encodes as the hub does",
		at(3, "V_3") + `: the name "V_3" is not a version name, such as v1beta1: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`,
		"kube: Resource.Versions[4] is a zero Version: make it with kube.NewVersion",
		"kube: Resource.Versions: v1 and v1 are each Storage: one version is stored, at most one of Versions (the Resource's own Version when none is)",
		"kube: Resource.ConversionWebhook has a URL and a Service (Namespace, Name, Port, Path): give one",
	}, msgs)
}

// duration encodes itself, as a string such as "1m30s": its schema is a
// kube.Schema, and reflection without Rules refuses it.
type duration struct{ d int64 }

func (d duration) MarshalJSON() ([]byte, error)  { return []byte(`"1s"`), nil }
func (d *duration) UnmarshalJSON(b []byte) error { return nil }

type (
	timedSpec struct {
		Timeout duration `json:"timeout"`
		Color   string   `json:"color,omitempty"`
	}
	// timedV1beta1Spec lacks timedSpec's color.
	timedV1beta1Spec struct {
		Timeout duration `json:"timeout"`
	}
)

// TestAVersionWithoutFunctionsMustEncodeAlikeWhenTheHubNeedsASchema: the
// hub's timeout needs a kube.Schema, so its types don't reflect without
// Rules; v1beta1, without functions, lacks the hub's color all the same,
// and is refused as a version of types that reflect alone is.
func TestAVersionWithoutFunctionsMustEncodeAlikeWhenTheHubNeedsASchema(t *testing.T) {
	schema := crdschema.Rules{Type: reflect.TypeFor[duration](), Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}
	v1beta1 := version[timedV1beta1Spec, widgetStatus]("v1beta1", false)
	v1beta1.Rules = []crdschema.Rules{schema}
	alike := version[timedSpec, widgetStatus]("v1alpha1", false)
	alike.Rules = []crdschema.Rules{schema}
	r := Resource{
		Hub: crdschema.Resource{
			Group: "example.com", Version: "v2", Kind: "Timed", Plural: "timeds", Scope: "Namespaced",
			Rules: []crdschema.Rules{schema},
			Spec:  reflect.TypeFor[timedSpec](), Status: reflect.TypeFor[widgetStatus](), Object: reflect.TypeFor[object[timedSpec, widgetStatus]](),
		},
		Versions: []Version{alike},
	}
	crd, err := CRD(r)
	require.NoError(t, err, "a version of the hub's types, with the same Schema, encodes alike")
	require.Equal(t, apiextensionsv1.NoneConverter, crd.Spec.Conversion.Strategy)

	r.Versions = []Version{v1beta1}
	_, err = CRD(r)
	require.EqualError(t, err, "kube: Resource.Versions[0] (v1beta1, *crdversions.object[github.com/z5labs/humus/kube/internal/crdversions.timedV1beta1Spec,github.com/z5labs/humus/kube/internal/crdversions.widgetStatus]) has no conversion functions, so it must encode as the hub v2 does, but its Spec crdversions.timedV1beta1Spec or Status crdversions.widgetStatus has other fields or types than v2's: give NewVersion its toHub and fromHub")
}
