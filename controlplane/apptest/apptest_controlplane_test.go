//go:build controlplane

package apptest_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: %s
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

const widgetV2 = `  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// UpgradeCRD adds a version and makes it the storage version: once it
// returns, the new version is served, storedVersions names both, and the
// Env applies objects at the new version.
func TestUpgradeCRDAddsAVersionAndSwitchesStorage(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.yaml")
	require.NoError(t, os.WriteFile(v1, fmt.Appendf(nil, widgetCRD, "true"), 0o600))
	v2 := filepath.Join(dir, "v2.yaml")
	require.NoError(t, os.WriteFile(v2, append(fmt.Appendf(nil, widgetCRD, "false"), widgetV2...), 0o600))
	e.InstallCRD(t, v1, "widgets.example.com")
	ns := e.Namespace(t, "upgrade")

	e.UpgradeCRD(t, v2, "widgets.example.com")
	crd, err := e.Dynamic.Resource(controlplanetest.CRDGVR).Get(t.Context(), "widgets.example.com", metav1.GetOptions{})
	require.NoError(t, err)
	stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	require.Equal(t, []string{"v1", "v2"}, stored)
	obj := filepath.Join(dir, "widget.yaml")
	require.NoError(t, os.WriteFile(obj, []byte("apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w, namespace: "+ns+"}\nspec: {size: 1}\n"), 0o600))
	e.Apply(t, obj)
	got, err := e.Dynamic.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}).Namespace(ns).Get(t.Context(), "w", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "example.com/v2", got.GetAPIVersion())
}

// RedirectWebhooks points an installed webhook configuration, as deployed
// (a Service), at the test's webhooks: the API server then calls the
// server serving Webhooks' certificate, trusting its CA.
func TestRedirectWebhooksPointsAnInstalledConfigurationAtTheTestsServer(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	w := apptest.NewWebhooks(t)
	cert, err := tls.LoadX509KeyPair(filepath.Join(w.CertDir, "tls.crt"), filepath.Join(w.CertDir, "tls.key"))
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", w.Addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, "no AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Message: "refused at " + r.URL.Path}}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(review)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	w.WaitServing(t)

	ns := e.Namespace(t, "redirect")
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	path := "/validate"
	_, err = e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "redirect-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "validate.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "nowhere", Name: "webhooks", Path: &path}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.RedirectWebhooks(t, w, apptest.ValidatingWebhookConfigurations, "redirect-"+ns)

	got, err := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), "redirect-"+ns, metav1.GetOptions{})
	require.NoError(t, err)
	cc := got.Webhooks[0].ClientConfig
	require.Nil(t, cc.Service)
	require.Equal(t, "https://"+w.Addr+"/validate", *cc.URL)
	require.Equal(t, w.CABundle(), cc.CABundle)
	controlplanetest.Eventually(t, 30*time.Second, "the test's server to refuse a ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := e.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "c-"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "refused at /validate"), nil
	})
}
