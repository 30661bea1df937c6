//go:build controlplane

package app_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// testMetricsAuth runs the App in a pod of the deploy files' ServiceAccount,
// with exactly their RBAC and their METRICS_ADDR's secure default (on a
// loopback port here, with the self-signed certificate it makes at start),
// and scrapes /metrics as three callers: with no token, answered 401; with
// the token of a ServiceAccount bound to nothing, 403; and with the token of
// one bound to the deploy files' metrics-reader ClusterRole, 200 and the
// controller's metrics, parsed with Prometheus' own parser. The API server
// decides each: the App asks it with a TokenReview and a
// SubjectAccessReview, which the deploy files' metrics-auth ClusterRole
// lets it create.
func testMetricsAuth(t *testing.T, e apptest.Env) {
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "metrics-rbac.yaml"} {
		e.Apply(t, "../deploy/"+f)
	}
	ctx := t.Context()
	ns := e.Namespace(t, "scrapers")
	for _, sa := range []string{"prometheus", "nobody"} {
		_, err := e.Kube.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	binding, err := e.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "memcached-metrics-reader-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "memcached-controller-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	reader, err := e.Cluster.ServiceAccountToken(ctx, ns, "prometheus")
	require.NoError(t, err)
	nobody, err := e.Cluster.ServiceAccountToken(ctx, ns, "nobody")
	require.NoError(t, err)

	probes, metrics := controlplanetest.FreeAddr(t), controlplanetest.FreeAddr(t)
	host := e.Pod(t, "memcached-system", "memcached-controller", "memcached-controller-0", apptest.PodEnv(map[string]string{
		appconfig.EnvProbesAddr:  probes,
		appconfig.EnvMetricsAddr: metrics,
		appconfig.EnvWatchNS:     ns,
		appconfig.EnvLogFormat:   "console",
		appconfig.EnvServiceName: "memcached-controller",
	}))
	// The API server's authorizer sees RBAC objects through a cache of its
	// own: wait until the bindings have taken effect, as the API server
	// itself answers the reviews the App will send.
	controller, err := e.Cluster.ServiceAccountToken(ctx, "memcached-system", "memcached-controller")
	require.NoError(t, err)
	waitAllowedTo(t, e.WithToken(t, controller), authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
	})
	waitAllowedTo(t, e.WithToken(t, controller), authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"},
	})
	waitAllowedTo(t, e.WithToken(t, reader), authzv1.SelfSubjectAccessReviewSpec{
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	})

	a := apptest.Start(t, app.Init, host, humus.WithTelemetry(app.BuildTelemetry))
	controlplanetest.Ready(t, probes)
	// The metrics Service listens beside the probes', not before them.
	controlplanetest.Eventually(t, 10*time.Second, "the metrics' listener on "+metrics, func(ctx context.Context) (bool, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", metrics)
		if err != nil {
			return false, nil
		}
		return true, conn.Close()
	})

	// The certificate is the self-signed one the App made at start, so the
	// scraper doesn't verify it, as Prometheus with insecure_skip_verify.
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the App's self-signed certificate, checked below
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := "https://" + metrics + appconfig.MetricsPath
	scrape := func(token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	t.Run("NoTokenIs401", func(t *testing.T) {
		resp, body := scrape("")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
		require.NotNil(t, resp.TLS, "served over TLS")
		require.Equal(t, []string{"localhost"}, resp.TLS.PeerCertificates[0].DNSNames, "the self-signed certificate")
		require.Equal(t, "HTTP/1.1", resp.Proto, "HTTP/2 is off")
	})

	t.Run("AnUnauthenticatedTokenIs401", func(t *testing.T) {
		resp, body := scrape(reader + "x")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	})

	t.Run("ATokenWithoutGetOnMetricsIs403", func(t *testing.T) {
		resp, body := scrape(nobody)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		require.Equal(t, fmt.Sprintf("Forbidden: user %q may not get /metrics\n", "system:serviceaccount:"+ns+":nobody"), body)
	})

	t.Run("ATokenBoundToTheMetricsReaderIs200AndTheMetrics", func(t *testing.T) {
		resp, body := scrape(reader)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(body))
		require.NoError(t, err)
		// Recorded from the App's first API request on: the requests it
		// made.
		requireFamily(t, families, clientMetric)
	})

	t.Run("PlainHTTPIsRefused", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metrics+appconfig.MetricsPath, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "Go's TLS server answers a plain request 400")
	})

	require.Equal(t, 0, a.Terminate(t))
}

// waitAllowedTo waits until the API server allows kc's user what spec asks,
// by a SelfSubjectAccessReview.
func waitAllowedTo(t *testing.T, kc kubernetes.Interface, spec authzv1.SelfSubjectAccessReviewSpec) {
	t.Helper()
	controlplanetest.Eventually(t, 10*time.Second, "the RBAC rules to take effect", func(ctx context.Context) (bool, error) {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	})
}

func requireFamily(t *testing.T, families map[string]*dto.MetricFamily, name string) {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "the family %s", name)
	require.NotEmpty(t, f.GetMetric(), name)
}
