package admission_test

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/kube/admission"
)

var update = flag.Bool("update", false, "rewrite the golden webhook configurations")

// golden compares got with the file, rewritten with -update.
func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(file, got, 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

var gadgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}

func validateWidgets() admission.Validating[Widget] {
	return admission.Validating[Widget]{
		Resource: widgets,
		Create:   func(context.Context, *Widget) error { return nil },
		Update:   func(context.Context, *Widget, *Widget) error { return nil },
	}
}

func defaultWidgets() admission.Defaulting[Widget] {
	return admission.Defaulting[Widget]{Resource: widgets, Default: func(context.Context, *Widget) error { return nil }}
}

var service = admission.ClientConfig{Namespace: "widgets-system", Name: "widgets-webhooks"}

// TestWebhookConfigurationsYAML is the configurations' golden test, as
// the CRD's: a Validating of two resources (one only for DELETE) and a
// Defaulting, behind a Service, with every default. A change to what is
// generated that isn't in the YAML fails go test. Rewrite it with
// -update.
func TestWebhookConfigurationsYAML(t *testing.T) {
	c := admission.Configuration{Name: "widgets.example.com", Client: service}
	got, err := admission.ValidatingWebhookConfigurationYAML(c, validateWidgets(),
		admission.Validating[Widget]{Resource: gadgets, Delete: func(context.Context, *Widget) error { return nil }})
	require.NoError(t, err)
	golden(t, "testdata/widgets.validatingwebhookconfiguration.yaml", got)

	got, err = admission.MutatingWebhookConfigurationYAML(c, defaultWidgets())
	require.NoError(t, err)
	golden(t, "testdata/widgets.mutatingwebhookconfiguration.yaml", got)
}

// TestWebhookConfigurationDefaults: what each webhook matches comes from
// the handler's values (the resource's group, version and plural; the
// operations with a function; CREATE and UPDATE for a Defaulting), and
// the defaults are controller-gen's: failurePolicy Fail, sideEffects
// None, admissionReviewVersions [v1], matchPolicy Equivalent,
// timeoutSeconds 10, the Service's port 443, the handler's path.
func TestWebhookConfigurationDefaults(t *testing.T) {
	vwc, err := admission.ValidatingWebhookConfiguration(admission.Configuration{Name: "widgets", Client: service},
		admission.Validating[Widget]{Resource: widgets, Update: func(context.Context, *Widget, *Widget) error { return nil }})
	require.NoError(t, err)
	require.Equal(t, "widgets", vwc.Name)
	require.Len(t, vwc.Webhooks, 1)
	w := vwc.Webhooks[0]
	require.Equal(t, "v1.widgets.example.com", w.Name)
	require.Equal(t, []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}},
	}}, w.Rules)
	require.Equal(t, admissionregistrationv1.Fail, *w.FailurePolicy)
	require.Equal(t, admissionregistrationv1.SideEffectClassNone, *w.SideEffects)
	require.Equal(t, []string{"v1"}, w.AdmissionReviewVersions)
	require.Equal(t, admissionregistrationv1.Equivalent, *w.MatchPolicy)
	require.EqualValues(t, 10, *w.TimeoutSeconds)
	require.Nil(t, w.NamespaceSelector)
	require.Nil(t, w.ObjectSelector)
	require.Nil(t, w.ClientConfig.URL)
	require.Equal(t, "widgets-system", w.ClientConfig.Service.Namespace)
	require.Equal(t, "widgets-webhooks", w.ClientConfig.Service.Name)
	require.EqualValues(t, 443, *w.ClientConfig.Service.Port)
	require.Equal(t, admission.ValidatePath, *w.ClientConfig.Service.Path)
	require.Empty(t, w.ClientConfig.CABundle)

	mwc, err := admission.MutatingWebhookConfiguration(admission.Configuration{Name: "widgets", Client: service}, defaultWidgets())
	require.NoError(t, err)
	m := mwc.Webhooks[0]
	require.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, m.Rules[0].Operations)
	require.Equal(t, admission.DefaultPath, *m.ClientConfig.Service.Path)
	require.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, *m.ReinvocationPolicy)

	require.Equal(t, "v1.configmaps.core", admission.WebhookName(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}))
}

// TestWebhookConfigurationURLAndOptions: a URL client gets the path
// appended (for a local run, the test's server), with its CA bundle; the
// options given are kept.
func TestWebhookConfigurationURLAndOptions(t *testing.T) {
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"webhook-test": "yes"}}
	c := admission.Configuration{
		Name:           "widgets",
		Client:         admission.ClientConfig{URL: "https://127.0.0.1:9443/", CABundle: []byte("PEM")},
		Path:           "/widgets/validate",
		FailurePolicy:  admissionregistrationv1.Ignore,
		TimeoutSeconds: 3,
		ObjectSelector: selector,
	}
	vwc, err := admission.ValidatingWebhookConfiguration(c, validateWidgets())
	require.NoError(t, err)
	w := vwc.Webhooks[0]
	require.Equal(t, "https://127.0.0.1:9443/widgets/validate", *w.ClientConfig.URL)
	require.Nil(t, w.ClientConfig.Service)
	require.Equal(t, []byte("PEM"), w.ClientConfig.CABundle)
	require.Equal(t, admissionregistrationv1.Ignore, *w.FailurePolicy)
	require.EqualValues(t, 3, *w.TimeoutSeconds)
	require.Equal(t, selector, w.ObjectSelector)
	require.NotSame(t, selector, w.ObjectSelector, "the configuration has its own copy")
}

// TestWebhookConfigurationMistakes: one error names every mistake, in the
// configuration and in the values, as Validate and Default name theirs.
func TestWebhookConfigurationMistakes(t *testing.T) {
	_, err := admission.ValidatingWebhookConfiguration(admission.Configuration{
		Name:           "Not_A_Name",
		Client:         admission.ClientConfig{Name: "webhooks", URL: "https://x"},
		Path:           "validate",
		FailurePolicy:  "Retry",
		TimeoutSeconds: 31,
	}, validateWidgets(), validateWidgets(), nil,
		admission.Validating[Widget]{Resource: schema.GroupVersionResource{Group: "example.com"}},
		admission.Validating[Widget]{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "Gadgets"}, Delete: func(context.Context, *Widget) error { return nil }})
	require.Error(t, err)
	for _, want := range []string{
		`admission: the ValidatingWebhookConfiguration "Not_A_Name"`,
		`Configuration.Name "Not_A_Name"`,
		`Configuration.Client has a URL and a Service (Namespace, Name, Port): give one`,
		`Configuration.Path "validate": must start with /`,
		`Configuration.FailurePolicy "Retry": not Fail or Ignore`,
		`Configuration.TimeoutSeconds 31: must be from 1 to 30`,
		`webhook 1 (example.com/v1, Resource=widgets): the resource is given twice, as webhook 0`,
		`webhook 2 is nil`,
		`webhook 3 (example.com/, Resource=): Resource.Version is empty`,
		`webhook 3 (example.com/, Resource=): Resource.Resource is empty`,
		`webhook 3 (example.com/, Resource=): no function: set Create, Update or Delete`,
		`webhook 4 (example.com/v1, Resource=Gadgets): its name "v1.Gadgets.example.com", <version>.<plural>.<group>: a lowercase RFC 1123 subdomain`,
	} {
		require.ErrorContains(t, err, want)
	}

	_, err = admission.MutatingWebhookConfiguration(admission.Configuration{}, admission.Defaulting[Widget]{Resource: widgets})
	require.Error(t, err)
	for _, want := range []string{
		`admission: the MutatingWebhookConfiguration ""`,
		`Configuration.Name is missing`,
		`Configuration.Client is missing: name the Service`,
		`webhook 0 (example.com/v1, Resource=widgets): Default is nil`,
	} {
		require.ErrorContains(t, err, want)
	}

	_, err = admission.MutatingWebhookConfiguration(admission.Configuration{Name: "widgets", Client: service})
	require.ErrorContains(t, err, "no webhook was given")
}

// TestWebhookConfigurationRefusesWhatTheAPIServerRefuses: a Service path
// with a segment that isn't a DNS-1123 subdomain (the API server's
// webhook.ValidateWebhookService) and a label selector with an unknown
// operator (metav1validation.ValidateLabelSelector) are named in the one
// error, each of them; a URL's path isn't held to the Service's rule.
func TestWebhookConfigurationRefusesWhatTheAPIServerRefuses(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Equals", Values: []string{"b"}}}}
	for _, c := range []struct {
		c    admission.Configuration
		want []string
	}{
		{admission.Configuration{Path: "/validate_widgets"}, []string{`Configuration.Path "/validate_widgets": segment 0 "validate_widgets": a lowercase RFC 1123 subdomain`}},
		{admission.Configuration{Path: "/validate//widgets"}, []string{`Configuration.Path "/validate//widgets": segment 1 is empty`}},
		{admission.Configuration{Path: "/Validate/x_y"}, []string{`segment 0 "Validate"`, `segment 1 "x_y"`}},
		{admission.Configuration{NamespaceSelector: bad, ObjectSelector: bad}, []string{
			`Configuration.NamespaceSelector.matchExpressions[0].operator: Invalid value: "Equals": not a valid selector operator`,
			`Configuration.ObjectSelector.matchExpressions[0].operator: Invalid value: "Equals": not a valid selector operator`,
		}},
	} {
		c.c.Name, c.c.Client = "widgets", service
		_, err := admission.ValidatingWebhookConfiguration(c.c, validateWidgets())
		for _, want := range c.want {
			require.ErrorContains(t, err, want, "%+v", c.c)
		}
	}
	for _, c := range []admission.Configuration{
		{Name: "widgets", Client: service, Path: "/"},
		{Name: "widgets", Client: service, Path: "/validate/widgets.example.com/"},
		{Name: "widgets", Client: admission.ClientConfig{URL: "https://127.0.0.1:9443"}, Path: "/validate_widgets"},
		{Name: "widgets", Client: service, ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpIn, Values: []string{"b"}}}}},
	} {
		_, err := admission.ValidatingWebhookConfiguration(c, validateWidgets())
		require.NoError(t, err, "%+v", c)
	}
}

// TestClientConfigCheck: Check names every mistake of a Service or a
// URL, as the API server checks a clientConfig.
func TestClientConfigCheck(t *testing.T) {
	require.NoError(t, service.Check())
	require.NoError(t, admission.ClientConfig{URL: "https://127.0.0.1:9443"}.Check())
	for _, tc := range []struct {
		c    admission.ClientConfig
		want []string
	}{
		{admission.ClientConfig{}, []string{"ClientConfig is missing"}},
		{admission.ClientConfig{Port: 70000}, []string{
			"ClientConfig.Name is missing", "ClientConfig.Namespace is missing", "ClientConfig.Port 70000: must be from 1 to 65535",
		}},
		{admission.ClientConfig{Namespace: "Bad_NS", Name: "1webhooks"}, []string{`ClientConfig.Namespace "Bad_NS"`, `ClientConfig.Name "1webhooks"`}},
		{admission.ClientConfig{URL: "http://user@:80/x?q#f"}, []string{
			"the scheme must be https", "it has no host", "it may have no user, query or fragment",
		}},
		{admission.ClientConfig{URL: "https://[::1"}, []string{`ClientConfig.URL "https://[::1"`}},
	} {
		err := tc.c.Check()
		require.Error(t, err, "%+v", tc.c)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, "%+v", tc.c)
		}
	}
}
