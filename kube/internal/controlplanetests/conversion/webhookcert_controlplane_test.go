//go:build controlplane

package conversion_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/webhookcert"
)

// certRBAC is the rules package webhookcert documents, for the Secret
// gizmo-webhook-cert in the namespace NAMESPACE and the Gizmos' CRD, bound
// to the ServiceAccount gizmo-webhooks.
const certRBAC = `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: gizmo-webhook-cert, namespace: NAMESPACE}
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [gizmo-webhook-cert]
  verbs: [get, update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gizmo-webhook-cert, namespace: NAMESPACE}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gizmo-webhook-cert}
subjects: [{kind: ServiceAccount, name: gizmo-webhooks, namespace: NAMESPACE}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gizmo-webhook-cert-NAMESPACE}
rules:
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: [gizmos.conversion.example.com]
  verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gizmo-webhook-cert-NAMESPACE}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gizmo-webhook-cert-NAMESPACE}
subjects: [{kind: ServiceAccount, name: gizmo-webhooks, namespace: NAMESPACE}]
`

// saClient returns a kube.Client that authenticates as the ServiceAccount
// ns/name.
func saClient(t *testing.T, cluster *controlplane.Cluster, s *humus.Setup, ns, name string) *kube.Client {
	t.Helper()
	token, err := cluster.ServiceAccountToken(t.Context(), ns, name)
	require.NoError(t, err)
	c, err := kube.NewClient(s, kube.Connection{Server: cluster.Server, TLS: cluster.TLS,
		Token: func(context.Context) (string, error) { return token, nil }})
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// servedCert returns the certificate c serves.
func servedCert(t *testing.T, c *webhookcert.Certs) []byte {
	t.Helper()
	cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	return cert.Certificate[0]
}

// TestAppManagedCertificatesWithTheirRulesAlone runs two replicas' Certs
// as a ServiceAccount bound to exactly the rules package webhookcert
// documents: refused without them; with them, the first check creates the
// Secret (kubernetes.io/tls with ca.crt) and gives the CRD its caBundle,
// the API server then converts through the webhook serving it, the other
// replica serves the same certificate, a check that finds the caBundle
// right writes nothing, and two replicas racing to create the Secret
// agree. The rules grant no other Secret.
func TestAppManagedCertificatesWithTheirRulesAlone(t *testing.T) {
	cluster := controlplanetest.Start(t)
	env := controlplanetest.NewEnv(t, cluster)
	ext, err := apiextensionsclient.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	ns := env.Namespace(t, "webhooks")
	_, err = env.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gizmo-webhooks"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	s := &humus.Setup{Host: humus.OSHost(), Telemetry: humustest.NewTelemetry(t).Telemetry}
	client := saClient(t, cluster, s, ns, "gizmo-webhooks")
	cfg := webhookcert.Config{Namespace: ns, Secret: "gizmo-webhook-cert", Hosts: []string{"127.0.0.1"},
		CRDs: []string{"gizmos.conversion.example.com"}}
	replica1, err := webhookcert.New(s, client, cfg)
	require.NoError(t, err)
	replica2, err := webhookcert.New(s, client, cfg)
	require.NoError(t, err)

	// The CRD calls replica 1, and trusts nothing yet.
	server := serveWebhook(t, replica1, nil)
	install(t, ext, gizmoCRD(t, webhookURL(server.addr), nil))

	// Without the rules, refused.
	_, err = replica1.Check(ctx)
	require.True(t, apierrors.IsForbidden(err), "without its rules: %v", err)
	require.Error(t, replica1.Healthy(ctx))

	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	require.NoError(t, os.WriteFile(rbac, bytes.ReplaceAll([]byte(certRBAC), []byte("NAMESPACE"), []byte(ns)), 0o600))
	env.Apply(t, rbac)
	sa := env.WithToken(t, mustToken(t, cluster, ns))
	controlplanetest.WaitAllowed(t, sa,
		func(ctx context.Context, kc kubernetes.Interface) error {
			_, err := kc.CoreV1().Secrets(ns).Get(ctx, cfg.Secret, metav1.GetOptions{})
			return err
		},
		func(ctx context.Context, kc kubernetes.Interface) error {
			return kc.CoreV1().RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", cfg.CRDs[0]).Do(ctx).Error()
		})

	_, err = replica1.Check(ctx)
	require.NoError(t, err, "with its rules")
	require.NoError(t, replica1.Healthy(ctx))
	sec, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, cfg.Secret, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.SecretTypeTLS, sec.Type)
	require.Equal(t, sec.Data[webhookcert.CAKey], replica1.CABundle())
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, cfg.CRDs[0], metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, replica1.CABundle(), crd.Spec.Conversion.Webhook.ClientConfig.CABundle, "the CA injected")
	require.Equal(t, webhookURL(server.addr), *crd.Spec.Conversion.Webhook.ClientConfig.URL, "the rest of the clientConfig kept")

	// The API server trusts the certificate it serves: a Gizmo created
	// at v1 is converted to v2 to be stored.
	controlplanetest.Eventually(t, 30*time.Second, "a Gizmo created at v1 through the webhook", func(ctx context.Context) (bool, error) {
		_, err := gizmos(dyn, "v1", ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "conversion.example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": "one"}, "spec": map[string]any{"size": int64(2)},
		}}, metav1.CreateOptions{})
		return err == nil, nil
	})

	// Replica 2 serves the same certificate, and writes nothing.
	_, err = replica2.Check(ctx)
	require.NoError(t, err)
	require.Equal(t, servedCert(t, replica1), servedCert(t, replica2))
	after, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, cfg.CRDs[0], metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, crd.ResourceVersion, after.ResourceVersion, "the caBundle is applied only when it differs")
	secAfter, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, cfg.Secret, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, sec.ResourceVersion, secAfter.ResourceVersion)

	// Both replicas create the Secret at once: one creates it, the other
	// reads it, and both serve the one certificate.
	require.NoError(t, env.Kube.CoreV1().Secrets(ns).Delete(ctx, cfg.Secret, metav1.DeleteOptions{}))
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, r := range []*webhookcert.Certs{replica1, replica2} {
		wg.Go(func() { _, errs[i] = r.Check(ctx) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, servedCert(t, replica1), servedCert(t, replica2), "racing replicas serve one certificate")
	require.NotEqual(t, sec.Data[corev1.TLSCertKey], servedCert(t, replica1))

	// The rules grant no other Secret, and no list.
	_, err = sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "list: %v", err)
	_, err = sa.CoreV1().Secrets("kube-system").Get(ctx, "anything", metav1.GetOptions{})
	require.True(t, apierrors.IsForbidden(err), "another namespace's Secret: %v", err)
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns}, StringData: map[string]string{"a": "b"}}
	_, err = env.Kube.CoreV1().Secrets(ns).Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = sa.CoreV1().Secrets(ns).Get(ctx, "other", metav1.GetOptions{})
	require.True(t, apierrors.IsForbidden(err), "another Secret of its namespace: %v", err)
}

func mustToken(t *testing.T, cluster *controlplane.Cluster, ns string) string {
	t.Helper()
	token, err := cluster.ServiceAccountToken(t.Context(), ns, "gizmo-webhooks")
	require.NoError(t, err)
	return token
}
