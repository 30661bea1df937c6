package appconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	certutil "k8s.io/client-go/util/cert"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

// readMetrics reads a Config's Metrics from a pod's environment and env.
func readMetrics(t *testing.T, env map[string]string) (appconfig.MetricsConfig, error) {
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
	return cfg.Metrics, err
}

func TestReadMetrics(t *testing.T) {
	m, err := readMetrics(t, nil)
	require.NoError(t, err)
	require.Equal(t, appconfig.MetricsConfig{}, m, "by default, no metrics are served")

	m, err = readMetrics(t, map[string]string{"METRICS_ADDR": ":8443", "METRICS_CERT_DIR": "/tmp/k8s-metrics-server/metrics-certs/"})
	require.NoError(t, err)
	require.Equal(t, appconfig.MetricsConfig{Addr: ":8443", CertDir: "tmp/k8s-metrics-server/metrics-certs"}, m)

	m, err = readMetrics(t, map[string]string{"METRICS_ADDR": "127.0.0.1:8080", "METRICS_SECURE": "false"})
	require.NoError(t, err)
	require.Equal(t, appconfig.MetricsConfig{Addr: "127.0.0.1:8080", Insecure: true}, m)
	for _, addr := range []string{"[::1]:8080", "localhost:8080"} {
		_, err = readMetrics(t, map[string]string{"METRICS_ADDR": addr, "METRICS_SECURE": "false"})
		require.NoError(t, err, addr)
	}

	_, err = readMetrics(t, map[string]string{"METRICS_ADDR": ":8080", "METRICS_SECURE": "false", "METRICS_CERT_DIR": "certs"})
	require.EqualError(t, err, `METRICS_CERT_DIR is "certs": it is an absolute path, such as /tmp/k8s-metrics-server/metrics-certs`+"\n"+
		"METRICS_SECURE is false, so METRICS_CERT_DIR is unused: unset one of them\n"+
		`METRICS_SECURE is false, so METRICS_ADDR ":8080" must be a loopback address, such as 127.0.0.1:8080: plain HTTP lets anyone in, which is for local runs only`)

	_, err = readMetrics(t, map[string]string{"METRICS_ADDR": "8443"})
	require.ErrorContains(t, err, `METRICS_ADDR is "8443": it is host:port, such as :8443`)
	_, err = readMetrics(t, map[string]string{"METRICS_SECURE": "maybe"})
	require.ErrorContains(t, err, "METRICS_SECURE")
}

func TestReadNamesABadPortAtStart(t *testing.T) {
	// Each was named only when its Service listened, as "service 1
	// (*health.probeServer): serve: health: listening for probes: listen
	// tcp: address 99999: invalid port", naming no variable.
	_, err := readMetrics(t, map[string]string{"PROBES_ADDR": ":99999", "METRICS_ADDR": ":http"})
	require.EqualError(t, err, `PROBES_ADDR is ":99999": its port "99999" is not a number from 0 to 65535; use host:port, such as :8081`+"\n"+
		`METRICS_ADDR is ":http": its port "http" is not a number from 0 to 65535; use host:port, such as :8443`)
	_, err = readMetrics(t, map[string]string{"PROBES_ADDR": "8081"})
	require.ErrorContains(t, err, `PROBES_ADDR is "8081": it is host:port, such as :8081`)
}

func TestReadNamesTheMetricsMistakesWithTheMalformedVariables(t *testing.T) {
	// A malformed variable and a metrics mistake used to take two starts
	// to find: the second was named only once the first was fixed.
	_, err := readMetrics(t, map[string]string{"WORKERS": "x", "METRICS_ADDR": "bad"})
	require.ErrorContains(t, err, `WORKERS: "x" is not an integer`)
	require.ErrorContains(t, err, `METRICS_ADDR is "bad": it is host:port`)
}

// client returns a Client of an API server that is never reached: a
// request with no token is refused before any review.
func client(t *testing.T, s *humus.Setup) *kube.Client {
	t.Helper()
	c, err := kube.NewClient(s, kube.Connection{Server: "10.0.0.1:443", TLS: &tls.Config{MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	return c
}

func TestServeMetricsServesTheCertDirsCertificateOnlyToAuthenticatedCallers(t *testing.T) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("memcached-controller-metrics.memcached-system.svc", nil, nil)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(certPEM))
	// synctest's clock starts in 2000, before the certificate is valid.
	issued := time.Now()
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		h.WriteFile("certs/tls.crt", certPEM)
		h.WriteFile("certs/tls.key", keyPEM)
		s := &humus.Setup{Host: h.Host}
		svc, err := appconfig.ServeMetrics(s, client(t, s), appconfig.MetricsConfig{Addr: ":8443", CertDir: "certs"})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()

		c := &http.Client{Transport: &http.Transport{
			DialContext: h.Dial,
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "memcached-controller-metrics.memcached-system.svc", MinVersion: tls.VersionTLS12,
				Time: func() time.Time { return issued }},
			DisableKeepAlives: true,
		}}
		resp, err := c.Get("https://pod.test:8443/metrics")
		require.NoError(t, err, "the certificate is the CertDir's, verified")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, "Unauthorized\n", string(body))
		require.Equal(t, "HTTP/1.1", resp.Proto)
	})
}

func TestServeMetricsWithoutACertDirMakesASelfSignedCertificate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		s := &humus.Setup{Host: h.Host}
		svc, err := appconfig.ServeMetrics(s, client(t, s), appconfig.MetricsConfig{Addr: ":8443"})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()
		c := &http.Client{Transport: &http.Transport{
			DialContext:       h.Dial,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the certificate is checked below
			DisableKeepAlives: true,
		}}
		resp, err := c.Get("https://pod.test:8443/metrics")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, []string{"localhost"}, resp.TLS.PeerCertificates[0].DNSNames)
	})
}

func TestServeMetricsLogsAFailedHandshakeThroughTheAppsLogger(t *testing.T) {
	// A scraper that doesn't trust the certificate was a line on the
	// Host's stderr, "health: probes: http: TLS handshake error ...",
	// outside the App's logs and named as the probes'.
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		tel := humustest.NewTelemetry(t)
		s := &humus.Setup{Host: h.Host, Telemetry: tel.Telemetry}
		svc, err := appconfig.ServeMetrics(s, client(t, s), appconfig.MetricsConfig{Addr: ":8443"})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()
		c := &http.Client{Transport: &http.Transport{
			DialContext:       h.Dial,
			TLSClientConfig:   &tls.Config{MinVersion: tls.VersionTLS12}, // trusts no self-made CA
			DisableKeepAlives: true,
		}}
		_, err = c.Get("https://pod.test:8443/metrics")
		require.ErrorContains(t, err, "tls: failed to verify certificate")
		synctest.Wait()
		require.Empty(t, h.StderrString())
		var names []string
		for _, r := range tel.Records() {
			if strings.Contains(r.Body().AsString(), "http: TLS handshake error") {
				r.WalkAttributes(func(kv attribute.KeyValue) bool {
					if kv.Key == "humus.server.name" {
						names = append(names, kv.Value.AsString())
					}
					return true
				})
			}
		}
		require.Equal(t, []string{"metrics"}, names)
	})
}

func TestServeMetricsInsecureServesAnyoneOverPlainHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := humustest.NewHost(t)
		tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
		require.NoError(t, err)
		s := &humus.Setup{Host: h.Host, Telemetry: tel}
		svc, err := appconfig.ServeMetrics(s, nil, appconfig.MetricsConfig{Addr: "127.0.0.1:8080", Insecure: true})
		require.NoError(t, err)
		humustest.TestService(t, svc)
		synctest.Wait()
		code, body := getBody(t, h, "http://127.0.0.1:8080/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, "# HELP")
		code, _ = getBody(t, h, "http://127.0.0.1:8080/readyz")
		require.Equal(t, http.StatusNotFound, code, "only /metrics is served")
		require.NoError(t, tel.Shutdown(context.Background()))
	})
}

func TestServeMetricsMistakes(t *testing.T) {
	h := humustest.NewHost(t)
	s := &humus.Setup{Host: h.Host}
	svc, err := appconfig.ServeMetrics(s, nil, appconfig.MetricsConfig{})
	require.NoError(t, err)
	require.Nil(t, svc, "no address, no Service")

	_, err = appconfig.ServeMetrics(s, nil, appconfig.MetricsConfig{Addr: ":8080", Insecure: true})
	require.ErrorContains(t, err, "must be a loopback address")
	_, err = appconfig.ServeMetrics(s, nil, appconfig.MetricsConfig{Addr: ":8443"})
	require.ErrorContains(t, err, "delegatedauth: Handler was given a nil Client")
	_, err = appconfig.ServeMetrics(s, client(t, s), appconfig.MetricsConfig{Addr: ":8443", CertDir: "missing"})
	// The directory as METRICS_CERT_DIR names it, with its leading slash,
	// not only as the FS does.
	require.EqualError(t, err, "the metrics' certificate, in METRICS_CERT_DIR /missing: httpserver: reading the certificate /missing/tls.crt: open missing/tls.crt: file does not exist")
}

func getBody(t *testing.T, h *humustest.Host, url string) (int, string) {
	t.Helper()
	resp, err := h.Client().Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
