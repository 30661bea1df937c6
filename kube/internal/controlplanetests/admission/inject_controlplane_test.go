//go:build controlplane

package admission_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/admission"
	"github.com/z5labs/humus/kube/webhookcert"
)

// TestWebhookCertInjectsIntoTheGeneratedConfigurations applies the
// generated configurations' YAML as a user does (server-side apply as
// kubectl), names them in webhookcert's Config, and checks that a Check
// gives every webhook of both its CA bundle, and that the user applying
// the same YAML again keeps it: the YAML has no caBundle, so kubectl's
// apply doesn't own the field webhookcert's apply set.
func TestWebhookCertInjectsIntoTheGeneratedConfigurations(t *testing.T) {
	cluster := controlplanetest.Start(t)
	kc, err := kubernetes.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	ctx := t.Context()
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client, err := kube.NewClient(s, kube.Connection{Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return cluster.Token, nil }})
	require.NoError(t, err)
	t.Cleanup(client.CloseIdleConnections)

	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	noop := func(context.Context, *corev1.ConfigMap) error { return nil }
	c := admission.Configuration{
		Name:   "humus-inject-test.example.com",
		Client: admission.ClientConfig{Namespace: "default", Name: "inject-webhooks"},
		// No object has the label: the webhooks, which nothing serves,
		// are called for none.
		ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"webhook-test": "inject"}},
	}
	validating, err := admission.ValidatingWebhookConfigurationYAML(c,
		admission.Validating[corev1.ConfigMap]{Resource: configmaps, Create: noop},
		admission.Validating[corev1.ConfigMap]{Resource: secrets, Delete: noop})
	require.NoError(t, err)
	mutating, err := admission.MutatingWebhookConfigurationYAML(c,
		admission.Defaulting[corev1.ConfigMap]{Resource: configmaps, Default: noop})
	require.NoError(t, err)
	vwcs := kc.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	mwcs := kc.AdmissionregistrationV1().MutatingWebhookConfigurations()
	apply := func() {
		opts := metav1.PatchOptions{FieldManager: "kubectl", FieldValidation: "Strict"}
		_, err := vwcs.Patch(ctx, c.Name, types.ApplyPatchType, validating, opts)
		require.NoError(t, err, "apply the ValidatingWebhookConfiguration")
		_, err = mwcs.Patch(ctx, c.Name, types.ApplyPatchType, mutating, opts)
		require.NoError(t, err, "apply the MutatingWebhookConfiguration")
	}
	apply()
	t.Cleanup(func() {
		_ = vwcs.Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		_ = mwcs.Delete(context.Background(), c.Name, metav1.DeleteOptions{})
	})

	certs, err := webhookcert.New(s, client, webhookcert.Config{Namespace: "default", Secret: "inject-webhook-cert",
		Hosts:                           []string{"inject-webhooks.default.svc"},
		ValidatingWebhookConfigurations: []string{c.Name},
		MutatingWebhookConfigurations:   []string{c.Name},
	})
	require.NoError(t, err)
	_, err = certs.Check(ctx)
	require.NoError(t, err)
	bundle := certs.CABundle()
	require.NotEmpty(t, bundle)

	injected := func() {
		t.Helper()
		vwc, err := vwcs.Get(ctx, c.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, vwc.Webhooks, 2)
		for _, w := range vwc.Webhooks {
			require.Equal(t, string(bundle), string(w.ClientConfig.CABundle), "validating webhook %s", w.Name)
			require.Equal(t, "inject-webhooks", w.ClientConfig.Service.Name, "the rest of the clientConfig is kept")
		}
		mwc, err := mwcs.Get(ctx, c.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, mwc.Webhooks, 1)
		require.Equal(t, string(bundle), string(mwc.Webhooks[0].ClientConfig.CABundle), "mutating webhook %s", mwc.Webhooks[0].Name)
	}
	injected()
	apply()
	injected()
}
