//go:build controlplane

package greetings_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/admission"

	"example.com/greetings"
)

// TestTheWholeApp runs the App against a real API server: its validating
// webhook, served with a test CA and named by a webhook configuration the
// test points at it, refuses a Greeting without a ConfigMap, and its
// Controller reports the greeting of a valid one.
func TestTheWholeApp(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	crd, err := greetings.Greetings.CRDYAML()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "crd.yaml")
	require.NoError(t, os.WriteFile(path, crd, 0o600))
	e.InstallCRD(t, path, "greetings.example.com")

	// The webhook configuration as deployed, naming the App's Service,
	// then pointed at the webhooks this test's App serves.
	webhooks := apptest.NewWebhooks(t)
	ns := e.Namespace(t, "greetings")
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	gvr := greetings.Greetings.GVR()
	_, err = e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "greetings-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.greetings.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "greetings-system", Name: "greetings-webhooks", Path: ptr(admission.ValidatePath)}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{gvr.Group}, APIVersions: []string{gvr.Version}, Resources: []string{gvr.Resource}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.RedirectWebhooks(t, webhooks, apptest.ValidatingWebhookConfigurations, "greetings-"+ns)

	cfg := greetings.Config{
		Connection: e.Connection(),
		Settings:   e.Settings("greetings", ns, ns, "replica-0"),
		ProbesAddr: controlplanetest.FreeAddr(t),
		Webhooks:   webhooks.Config(),
	}
	a := apptest.Start(t, greetings.New(cfg), humus.OSHost())
	controlplanetest.Ready(t, cfg.ProbesAddr)
	webhooks.WaitServing(t)

	greeting := func(name, configMap string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Greeting",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"configMap": configMap},
		}}
	}
	// The API server takes the redirected configuration up a moment
	// after the update: until then, the Service it named doesn't answer
	// and the create fails for that reason, not the App's.
	controlplanetest.Eventually(t, 30*time.Second, "the webhook to refuse a Greeting without a ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := e.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, greeting("nameless", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "spec.configMap is empty"), nil
	})

	_, err = e.Dynamic.Resource(gvr).Namespace(ns).Create(t.Context(), greeting("hi", "words"), metav1.CreateOptions{})
	require.NoError(t, err, "a valid Greeting is allowed")
	_, err = e.Dynamic.Resource(greetings.ConfigMaps()).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "words"},
		"data":     map[string]any{"greeting": "hello"},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	controlplanetest.Eventually(t, 30*time.Second, "the greeting in the status", func(ctx context.Context) (bool, error) {
		g, err := e.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, "hi", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s, _, _ := unstructured.NestedString(g.Object, "status", "greeting")
		return s == "hello", nil
	})
	require.Equal(t, 0, a.Terminate(t))
}

func ptr[T any](v T) *T { return &v }
