//go:build controlplane

package app_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
	"github.com/z5labs/humus/kube/webhookcert"
)

// TestMemcachedAppManagedWebhookCertificate runs the whole Memcached App
// as deploy-webhook/app-managed deploys it: in a pod of the ServiceAccount
// memcached-controller bound to exactly ../deploy/rbac.yaml and
// ../deploy-webhook/app-managed/rbac.yaml (generated from
// app.WebhookCertRBAC), with WEBHOOK_CERT_SECRET. The App makes its
// certificate in that Secret, becomes ready, and injects the Secret's CA
// into the caBundle of the CRD's conversion webhook and of every webhook
// of the generated ValidatingWebhookConfiguration and
// MutatingWebhookConfiguration (../deploy/webhooks); the certificate it
// serves is for memcached-webhooks.memcached-system.svc and verifies
// against that caBundle. With no kubelet and no Service endpoints, the API
// server doesn't call the webhooks here; the App's own caches list no
// Memcached, so no conversion is asked either.
func TestMemcachedAppManagedWebhookCertificate(t *testing.T) {
	e := apptest.NewEnv(t, controlplanetest.Start(t))
	const (
		ns     = "memcached-system"
		sa     = "memcached-controller"
		secret = "memcached-webhook-cert"
	)
	for _, f := range []string{"../deploy/namespace.yaml", "../deploy/serviceaccount.yaml", "../deploy/rbac.yaml", "../deploy-webhook/app-managed/rbac.yaml"} {
		e.Apply(t, f)
	}
	e.InstallCRD(t, crdFile, crdName)
	// failurePolicy Fail, calling a Service with no endpoints: removed
	// after the test, for a cluster HUMUS_TEST_KUBECONFIG names.
	t.Cleanup(func() {
		_ = e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), app.WebhookConfiguration().Name, metav1.DeleteOptions{})
		_ = e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), app.WebhookConfiguration().Name, metav1.DeleteOptions{})
	})
	e.Apply(t, "../deploy/webhooks/validatingwebhookconfiguration.yaml")
	e.Apply(t, "../deploy/webhooks/mutatingwebhookconfiguration.yaml")

	probes := controlplanetest.FreeAddr(t)
	webhooks := controlplanetest.FreeAddr(t)
	host := e.Pod(t, ns, sa, sa+"-0", apptest.PodEnv(map[string]string{
		appconfig.EnvProbesAddr:        probes,
		appconfig.EnvWebhookAddr:       webhooks,
		appconfig.EnvWebhookCertSecret: secret,
	}))
	token, err := fs.ReadFile(host.FS, appconfig.ServiceAccountDir+"token")
	require.NoError(t, err)
	saKube := e.WithToken(t, string(token))
	name := app.WebhookConfiguration().Name
	controlplanetest.WaitAllowed(t, saKube,
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
			return err
		},
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			return err
		},
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			return err
		},
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.AppsV1().Deployments("").List(ctx, metav1.ListOptions{Limit: 1})
			return err
		})
	// Exactly those rules: no other Secret.
	_, err = saKube.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "listing Secrets with the ServiceAccount's token: %v", err)

	a := apptest.Start(t, app.Init, host)
	controlplanetest.Ready(t, probes)

	ctx := t.Context()
	sec, err := e.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	require.NoError(t, err, "the App's Secret")
	ca := sec.Data[webhookcert.CAKey]
	require.NotEmpty(t, ca, "the Secret's %s", webhookcert.CAKey)

	// The caBundle is injected by the App's Certs, each object by its own
	// apply, so the ones after the CRD may land just after readiness.
	var seen string
	controlplanetest.Eventually(t, 30*time.Second, "the Secret's CA in the caBundle of the CRD and of both webhook configurations", func(ctx context.Context) (bool, error) {
		crd, err := e.Dynamic.Resource(controlplanetest.CRDGVR).Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		crdBundle, _, err := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		if err != nil {
			return false, err
		}
		vwc, err := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mwc, err := e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(vwc.Webhooks) != 1 || len(mwc.Webhooks) != 1 {
			return false, fmt.Errorf("the generated configurations have %d and %d webhooks, want 1 each", len(vwc.Webhooks), len(mwc.Webhooks))
		}
		if now := fmt.Sprintf("the Secret's CA in the caBundle of the CRD %t, of the ValidatingWebhookConfiguration %t, of the MutatingWebhookConfiguration %t",
			crdBundle == base64.StdEncoding.EncodeToString(ca), bytes.Equal(vwc.Webhooks[0].ClientConfig.CABundle, ca), bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, ca)); now != seen {
			t.Log(now)
			seen = now
		}
		return crdBundle == base64.StdEncoding.EncodeToString(ca) &&
			bytes.Equal(vwc.Webhooks[0].ClientConfig.CABundle, ca) &&
			bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, ca), nil
	})
	// The rest of each configuration's clientConfig is kept.
	vwc, err := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	mwc, err := e.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, svc := range []*admissionregistrationv1.ServiceReference{vwc.Webhooks[0].ClientConfig.Service, mwc.Webhooks[0].ClientConfig.Service} {
		require.NotNil(t, svc)
		require.Equal(t, "memcached-webhooks", svc.Name)
		require.Equal(t, ns, svc.Namespace)
		require.NotNil(t, svc.Path)
	}

	// What the App serves is trusted by that caBundle, for the Service's
	// name.
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	conn, err := tls.Dial("tcp", webhooks, &tls.Config{RootCAs: pool, ServerName: "memcached-webhooks." + ns + ".svc", MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "the served certificate verified against the injected caBundle")
	require.NoError(t, conn.Close())

	require.Equal(t, 0, a.Terminate(t))
}
