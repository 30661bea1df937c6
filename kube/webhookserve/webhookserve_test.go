package webhookserve_test

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
	"github.com/z5labs/humus/kube/webhookcert"
	"github.com/z5labs/humus/kube/webhookserve"
)

func TestServeServesTheCertDirsCertificateOverHTTP2(t *testing.T) {
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
		svcs, err := webhookserve.Serve(s, nil, webhookserve.Config{Addr: ":9443", CertDir: "/certs"}, mux)
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

// CertDir has one rule, an absolute path, as a volume's mountPath is, and
// a relative one is refused with what to set instead.
func TestARelativeCertDirIsRefusedSayingWhatToSet(t *testing.T) {
	s := &humus.Setup{Host: humustest.NewHost(t).Host}
	_, err := webhookserve.Serve(s, nil, webhookserve.Config{Addr: ":9443", CertDir: "certs"}, http.NewServeMux())
	require.EqualError(t, err, `webhookserve: Config.CertDir is "certs", a relative path: give the directory's absolute path, the mountPath of the volume of its kubernetes.io/tls Secret, such as /tmp/k8s-webhook-server/serving-certs`)
}

func TestServeNamesEveryMistake(t *testing.T) {
	s := &humus.Setup{Host: humustest.NewHost(t).Host}
	svcs, err := webhookserve.Serve(s, nil, webhookserve.Config{}, http.NewServeMux())
	require.NoError(t, err)
	require.Nil(t, svcs, "no address, no webhooks")
	_, err = webhookserve.Serve(s, nil, webhookserve.Config{Addr: ":9443", CertDir: "/missing"}, http.NewServeMux())
	require.ErrorContains(t, err, "webhookserve: the webhooks' certificate, from /missing")

	_, err = webhookserve.Serve(nil, nil, webhookserve.Config{Addr: "9443", CertDir: "certs", CertSecret: "cert"}, nil)
	require.EqualError(t, err, `webhookserve: Config.CertDir is "certs", a relative path: give the directory's absolute path, the mountPath of the volume of its kubernetes.io/tls Secret, such as /tmp/k8s-webhook-server/serving-certs`+"\n"+
		"webhookserve: Config.CertDir and Config.CertSecret are both set: the certificate is either mounted (CertDir) or made and kept by the App in a Secret (CertSecret), so set one\n"+
		`webhookserve: Config.Addr is "9443": it must be host:port with a port number, such as :9443`+"\n"+
		"webhookserve: Config.CertSecret is set but Config.Namespace, the Secret's (the App's own), is empty\n"+
		"webhookserve: Config.CertSecret is set but Config.Service, the webhooks' Service name, is empty\n"+
		"webhookserve: Config.CertSecret is set but Config.CRDs, Config.ValidatingWebhookConfigurations and Config.MutatingWebhookConfigurations, whose caBundle the App sets, are all empty\n"+
		"webhookserve: Serve was given a nil Setup\n"+
		"webhookserve: Serve was given a nil handler")
	_, err = webhookserve.Serve(s, nil, webhookserve.Config{CertDir: "/certs"}, http.NewServeMux())
	require.EqualError(t, err, "webhookserve: Config.CertDir or Config.CertSecret is set but Config.Addr isn't: set Addr to serve the webhooks, or neither")
	_, err = webhookserve.Serve(s, nil, webhookserve.Config{Addr: ":9443"}, http.NewServeMux())
	require.EqualError(t, err, "webhookserve: Config.Addr is set but neither Config.CertDir nor Config.CertSecret is: the API server calls a webhook over TLS, so mount its serving certificate (a kubernetes.io/tls Secret) and name the directory, such as /tmp/k8s-webhook-server/serving-certs, or name the Secret the App keeps one in")

	_, err = webhookserve.Serve(s, nil, webhookserve.Config{Addr: ":9443", CertSecret: "memcached-webhook-cert", Namespace: "memcached-system",
		Service: "memcached-webhooks", CRDs: []string{"memcacheds.cache.example.com"}}, http.NewServeMux())
	require.ErrorContains(t, err, "webhookserve: the webhooks' certificate, kept in the Secret memcached-system/memcached-webhook-cert: webhookcert: New was given a nil Client")
}

// A Secret kept by the App has its CA injected into the webhook
// configurations the Config names, as into its CRDs; admission webhooks
// alone, with no CRD, are enough.
func TestCertConfigInjectsIntoWebhookConfigurations(t *testing.T) {
	c := webhookserve.Config{Addr: ":9443", CertSecret: "memcached-webhook-cert", Namespace: "memcached-system", Service: "memcached-webhooks",
		CRDs:                            []string{"memcacheds.cache.example.com"},
		ValidatingWebhookConfigurations: []string{"memcached-validating"},
		MutatingWebhookConfigurations:   []string{"memcached-mutating"},
	}
	require.Equal(t, webhookcert.Config{
		Namespace: "memcached-system", Secret: "memcached-webhook-cert", Hosts: []string{"memcached-webhooks.memcached-system.svc"},
		CRDs:                            []string{"memcacheds.cache.example.com"},
		ValidatingWebhookConfigurations: []string{"memcached-validating"},
		MutatingWebhookConfigurations:   []string{"memcached-mutating"},
	}, c.CertConfig())
	c.CRDs = nil
	require.NoError(t, c.Check(), "webhook configurations alone")
}
