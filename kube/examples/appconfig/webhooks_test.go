package appconfig_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/z5labs/humus"
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
	require.Equal(t, appconfig.WebhookConfig{Addr: ":9443", CertDir: "/tmp/k8s-webhook-server/serving-certs"}, w)

	_, err = readWebhooks(t, map[string]string{"WEBHOOK_ADDR": "9443", "WEBHOOK_CERT_DIR": "certs", "METRICS_ADDR": "bad"})
	require.ErrorContains(t, err, `METRICS_ADDR is "bad"`, "named with the webhooks' mistakes")
	require.ErrorContains(t, err, `WEBHOOK_CERT_DIR is "certs", a relative path: set it to the directory's absolute path, the mountPath of the volume of its kubernetes.io/tls Secret, such as /tmp/k8s-webhook-server/serving-certs`+"\n"+
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
