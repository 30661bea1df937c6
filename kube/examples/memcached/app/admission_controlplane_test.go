//go:build controlplane

package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/admission"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// TestMemcachedAdmission runs the Memcached App with its webhooks served
// over TLS from the App itself, and the admission webhook configurations
// generated from what it serves (app.WebhookConfiguration with a URL, as
// for a local run, and the CA of the App's certificate, in place of the
// Service): the real API server defaults a Memcached's requests from its
// limits and refuses a request over its limit, naming it, and a write at
// v1alpha1 reaches the v1beta1 webhooks converted (matchPolicy
// Equivalent).
func TestMemcachedAdmission(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	ns := e.Namespace(t, "admission")
	webhooks, tel, _ := startServingWebhooks(t, e, ns)

	c := app.WebhookConfiguration()
	c.Client = admission.ClientConfig{URL: "https://" + webhooks.Addr, CABundle: webhooks.CABundle()}
	vwc, err := admission.ValidatingWebhookConfiguration(c, app.Validating())
	require.NoError(t, err)
	mwc, err := admission.MutatingWebhookConfiguration(c, app.Defaulting())
	require.NoError(t, err)
	_, err = e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), vwc, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), mwc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), vwc.Name, metav1.DeleteOptions{})
		_ = e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})

	at := func(version string) *unstructuredClient {
		return &unstructuredClient{e: e, ns: ns, version: version}
	}
	beta, alpha := at("v1beta1"), at("v1alpha1")
	resources := func(limit, request string) map[string]any {
		r := map[string]any{"limits": map[string]any{"memory": limit}}
		if request != "" {
			r["requests"] = map[string]any{"memory": request}
		}
		return r
	}

	// The API server reads webhook configurations from an informer: a
	// Memcached created before they are in effect isn't defaulted, so
	// create one a moment until one is (the API server says nothing when
	// they are), then wait for the validating one too.
	var defaulted *unstructured.Unstructured
	controlplanetest.Eventually(t, 30*time.Second, "the mutating webhook in effect", func(ctx context.Context) (bool, error) {
		m, err := beta.create(ctx, map[string]any{"size": int64(1), "resources": resources("64Mi", "")})
		if err != nil {
			return false, err
		}
		defaulted = m
		_, ok, _ := unstructured.NestedString(m.Object, "spec", "resources", "requests", "memory")
		return ok, nil
	})
	request, _, _ := unstructured.NestedString(defaulted.Object, "spec", "resources", "requests", "memory")
	require.Equal(t, "64Mi", request, "the request defaulted to the limit")

	var refused error
	controlplanetest.Eventually(t, 30*time.Second, "the validating webhook in effect", func(ctx context.Context) (bool, error) {
		_, refused = beta.create(ctx, map[string]any{"size": int64(1), "resources": resources("64Mi", "128Mi")})
		return refused != nil, nil
	})
	require.ErrorContains(t, refused, `admission webhook "v1beta1.memcacheds.cache.example.com" denied the request: spec.resources.requests.memory: 128Mi is over its limit 64Mi: lower the request or raise the limit`)

	// A write at v1alpha1 is converted to v1beta1 and sent to the same
	// webhooks, which the App counts under v1beta1. Only CREATE reviews
	// are counted: the App's own finalizer applies to the Memcacheds
	// created above are UPDATE reviews, which may come at any moment.
	before := reviews(t, tel)
	_, err = alpha.create(t.Context(), map[string]any{"size": int64(1)})
	require.NoError(t, err)
	after := reviews(t, tel)
	gvr := app.Memcached.GVR().String()
	for _, kind := range []string{"validating", "defaulting"} {
		k := kind + " " + gvr + " CREATE"
		require.Equal(t, before[k]+1, after[k], "%s CREATE reviews of %s: %v", kind, gvr, after)
	}
	for k := range after {
		require.Contains(t, k, "v1beta1", "no review of another version")
	}
}

// unstructuredClient creates Memcacheds at a version, each with a name
// of its own.
type unstructuredClient struct {
	e       apptest.Env
	ns      string
	version string
	n       int
}

func (u *unstructuredClient) create(ctx context.Context, spec map[string]any) (*unstructured.Unstructured, error) {
	u.n++
	ri := u.e.Dynamic.Resource(schema.GroupVersionResource{Group: app.Memcached.Group, Version: u.version, Resource: app.Memcached.Plural}).Namespace(u.ns)
	return ri.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": app.Memcached.Group + "/" + u.version, "kind": "Memcached",
		"metadata": map[string]any{"name": fmt.Sprintf("%s-%d", u.version, u.n)}, "spec": spec,
	}}, metav1.CreateOptions{FieldManager: "test", FieldValidation: "Strict"})
}

// reviews are the App's admission reviews so far, by "<webhook>
// <resource> <operation>".
func reviews(t *testing.T, tel *humustest.Telemetry) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	m, ok := tel.Metric("github.com/z5labs/humus/kube/admission", "humus.kube.admission.reviews")
	if !ok {
		return got
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		kind, _ := dp.Attributes.Value("humus.kube.admission.webhook")
		res, _ := dp.Attributes.Value("humus.kube.admission.resource")
		op, _ := dp.Attributes.Value("humus.kube.admission.operation")
		got[kind.AsString()+" "+res.AsString()+" "+op.AsString()] += dp.Value
	}
	return got
}
