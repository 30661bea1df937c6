package appconfig_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/httpserver"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

// readWebhooks reads a Config's Webhooks from a pod's environment and env.
func readWebhooks(t *testing.T, env map[string]string) (appconfig.WebhookConfig, error) {
	t.Helper()
	h := humustest.NewHost(t)
	ca, _ := selfSigned(t)
	h.WriteFile(appconfig.ServiceAccountDir+"ca.crt", ca)
	h.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	h.SetEnv("KUBERNETES_SERVICE_PORT", "443")
	h.SetEnv("POD_NAMESPACE", "memcached-system")
	h.SetEnv("POD_NAME", "memcached-controller-0")
	for k, v := range env {
		h.SetEnv(k, v)
	}
	cfg, err := appconfig.Read(t.Context(), &humus.Setup{Host: h.Host}, "memcached-controller")
	return cfg.Webhooks, err
}

func TestReadWebhooks(t *testing.T) {
	w, err := readWebhooks(t, nil)
	require.NoError(t, err)
	require.Equal(t, appconfig.WebhookConfig{}, w, "by default, no webhooks are served")

	w, err = readWebhooks(t, map[string]string{"WEBHOOK_ADDR": ":9443", "WEBHOOK_CERT_DIR": "/tmp/k8s-webhook-server/serving-certs/"})
	require.NoError(t, err)
	require.Equal(t, appconfig.WebhookConfig{Addr: ":9443", CertDir: "tmp/k8s-webhook-server/serving-certs"}, w)

	_, err = readWebhooks(t, map[string]string{"WEBHOOK_ADDR": "9443", "WEBHOOK_CERT_DIR": "certs", "METRICS_ADDR": "bad"})
	require.ErrorContains(t, err, `METRICS_ADDR is "bad"`, "named with the webhooks' mistakes")
	require.ErrorContains(t, err, `WEBHOOK_CERT_DIR is "certs": it is an absolute path, such as /tmp/k8s-webhook-server/serving-certs`+"\n"+
		`WEBHOOK_ADDR is "9443": it is host:port, such as :9443`)

	_, err = readWebhooks(t, map[string]string{"WEBHOOK_ADDR": ":9443"})
	require.EqualError(t, err, "WEBHOOK_ADDR is set but neither WEBHOOK_CERT_DIR nor WEBHOOK_CERT_SECRET is: the API server calls a webhook over TLS, so mount its serving certificate (a kubernetes.io/tls Secret) and name the directory, such as /tmp/k8s-webhook-server/serving-certs, or name the Secret the App keeps one in")
	_, err = readWebhooks(t, map[string]string{"WEBHOOK_CERT_DIR": "/certs"})
	require.EqualError(t, err, "WEBHOOK_CERT_DIR is set but WEBHOOK_ADDR isn't: set both to serve the webhooks, or neither")
}

func TestReadWebhooksWithACertificateSecret(t *testing.T) {
	// The deploy files' app-managed way: the Secret in the pod's namespace.
	w, err := readWebhooks(t, map[string]string{"WEBHOOK_ADDR": ":9443", "WEBHOOK_CERT_SECRET": "memcached-webhook-cert"})
	require.NoError(t, err)
	require.Equal(t, appconfig.WebhookConfig{Addr: ":9443", CertSecret: "memcached-webhook-cert", Namespace: "memcached-system"}, w)

	_, err = readWebhooks(t, map[string]string{"WEBHOOK_ADDR": ":9443", "WEBHOOK_CERT_SECRET": "memcached-webhook-cert", "WEBHOOK_CERT_DIR": "/certs"})
	require.EqualError(t, err, "WEBHOOK_CERT_DIR and WEBHOOK_CERT_SECRET are both set: the certificate is either mounted (WEBHOOK_CERT_DIR) or made and kept by the App in a Secret (WEBHOOK_CERT_SECRET), so set one")
	_, err = readWebhooks(t, map[string]string{"WEBHOOK_CERT_SECRET": "memcached-webhook-cert"})
	require.EqualError(t, err, "WEBHOOK_CERT_SECRET is set but WEBHOOK_ADDR isn't: set both to serve the webhooks, or neither")
}

func TestServeWebhooksServesTheCertDirsCertificateOverHTTP2(t *testing.T) {
	ca, err := httpserver.NewAuthority(0, "memcached-webhooks.memcached-system.svc")
	require.NoError(t, err)
	certPEM, keyPEM := ca.ServingPEM()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CABundle()))
	issued := time.Now()
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		h.WriteFile("certs/tls.crt", certPEM)
		h.WriteFile("certs/tls.key", keyPEM)
		s := &humus.Setup{Host: h.Host}
		mux := http.NewServeMux()
		mux.HandleFunc("/convert", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "converted") })
		svcs, err := appconfig.ServeWebhooks(s, nil, appconfig.WebhookConfig{Addr: ":9443", CertDir: "certs"}, mux)
		require.NoError(t, err)
		require.Len(t, svcs, 1)
		humustest.TestService(t, svcs[0])
		synctest.Wait()

		tr := &http.Transport{
			DialContext: h.Dial,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "memcached-webhooks.memcached-system.svc", MinVersion: tls.VersionTLS12,
				Time: func() time.Time { return issued }},
			ForceAttemptHTTP2: true,
		}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Post("https://pod.test:9443/convert", "application/json", nil)
		require.NoError(t, err, "the certificate is the CertDir's, verified")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "converted", string(body))
		require.Equal(t, "HTTP/2.0", resp.Proto)
	})
}

func TestServeWebhooksMistakes(t *testing.T) {
	s := &humus.Setup{Host: humustest.NewHost(t).Host}
	svcs, err := appconfig.ServeWebhooks(s, nil, appconfig.WebhookConfig{}, http.NewServeMux())
	require.NoError(t, err)
	require.Nil(t, svcs, "no address, no webhooks")
	_, err = appconfig.ServeWebhooks(s, nil, appconfig.WebhookConfig{Addr: ":9443", CertDir: "missing"}, http.NewServeMux())
	require.ErrorContains(t, err, "the webhooks' certificate, from WEBHOOK_CERT_DIR /missing")

	// A Secret kept by the App needs the Service and the CRDs the App
	// names, and a Client.
	_, err = appconfig.ServeWebhooks(s, nil, appconfig.WebhookConfig{Addr: ":9443", CertSecret: "memcached-webhook-cert", Namespace: "memcached-system"}, http.NewServeMux())
	require.EqualError(t, err, "WEBHOOK_CERT_SECRET is set but WebhookConfig.Service, the webhooks' Service name, is empty\n"+
		"WEBHOOK_CERT_SECRET is set but WebhookConfig.CRDs, whose caBundle the App sets, is empty")
	_, err = appconfig.ServeWebhooks(s, nil, appconfig.WebhookConfig{Addr: ":9443", CertSecret: "memcached-webhook-cert", Namespace: "memcached-system",
		Service: "memcached-webhooks", CRDs: []string{"memcacheds.cache.example.com"}}, http.NewServeMux())
	require.ErrorContains(t, err, "the webhooks' certificate, kept in the Secret memcached-system/memcached-webhook-cert (WEBHOOK_CERT_SECRET): webhookcert: New was given a nil Client")
}
