package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/z5labs/humus/kube/admission"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// TestMemcachedWebhookConfigurations keeps ../deploy/webhooks' two
// configurations true to the webhooks the App serves (app.Validating,
// app.Defaulting) and app.WebhookConfiguration, as TestMemcachedCRD keeps
// the CRD: a change that isn't in the YAML fails here. go test -run
// TestMemcachedWebhookConfigurations -update rewrites the files.
func TestMemcachedWebhookConfigurations(t *testing.T) {
	for _, tc := range []struct {
		golden string
		yaml   func() ([]byte, error)
	}{
		{"../deploy/webhooks/validatingwebhookconfiguration.yaml", func() ([]byte, error) {
			return admission.ValidatingWebhookConfigurationYAML(app.WebhookConfiguration(), app.Validating())
		}},
		{"../deploy/webhooks/mutatingwebhookconfiguration.yaml", func() ([]byte, error) {
			return admission.MutatingWebhookConfigurationYAML(app.WebhookConfiguration(), app.Defaulting())
		}},
	} {
		got, err := tc.yaml()
		require.NoError(t, err)
		golden(t, tc.golden, got)
	}
}

func withResources(r *corev1.ResourceRequirements) *app.Object {
	m := memcached()
	m.Spec.Resources = r
	return &m
}

// TestDefaultingCopiesLimitsIntoMissingRequests: a limit without a
// request becomes the request; a request given is kept, and so is a
// Memcached without resources.
func TestDefaultingCopiesLimitsIntoMissingRequests(t *testing.T) {
	d := app.Defaulting()
	m := withResources(&corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	})
	require.NoError(t, d.Default(t.Context(), m))
	require.Equal(t, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")}, m.Spec.Resources.Requests)

	m = withResources(&corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}})
	require.NoError(t, d.Default(t.Context(), m))
	require.Equal(t, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}, m.Spec.Resources.Requests)

	m = withResources(nil)
	require.NoError(t, d.Default(t.Context(), m))
	require.Nil(t, m.Spec.Resources)
}

// TestValidatingRefusesARequestOverItsLimit, on CREATE and UPDATE, naming
// each such request; a request without a limit is fine.
func TestValidatingRefusesARequestOverItsLimit(t *testing.T) {
	v := app.Validating()
	ok := withResources(&corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("1")},
	})
	require.NoError(t, v.Create(t.Context(), ok))
	require.NoError(t, v.Create(t.Context(), withResources(nil)))

	over := withResources(&corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("200m")},
	})
	for _, err := range []error{v.Create(t.Context(), over), v.Update(t.Context(), over, ok)} {
		require.EqualError(t, err, "spec.resources.requests.cpu: 200m is over its limit 100m: lower the request or raise the limit\n"+
			"spec.resources.requests.memory: 128Mi is over its limit 64Mi: lower the request or raise the limit")
	}
}
