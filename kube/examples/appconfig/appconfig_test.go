package appconfig_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/humustest"
	"github.com/z5labs/humus/kube"
	"github.com/z5labs/humus/kube/examples/appconfig"
)

func TestInPodReadsTheServiceAccountThroughTheFS(t *testing.T) {
	h := humustest.NewHost(t)
	ca, _ := selfSigned(t)
	h.WriteFile(appconfig.ServiceAccountDir+"ca.crt", ca)
	h.WriteFile(appconfig.ServiceAccountDir+"token", []byte("first\n"))

	conn, err := appconfig.InPod(h.FS, "fd00::1", "443")
	require.NoError(t, err)
	require.Equal(t, "[fd00::1]:443", conn.Server)
	require.NotNil(t, conn.TLS.RootCAs)
	tok, err := conn.Token(t.Context())
	require.NoError(t, err)
	require.Equal(t, "first", tok)

	// A token the kubelet rotates is read again.
	h.WriteFile(appconfig.ServiceAccountDir+"token", []byte("second"))
	tok, err = conn.Token(t.Context())
	require.NoError(t, err)
	require.Equal(t, "second", tok)
}

func TestInPodWithoutACANamesIt(t *testing.T) {
	h := humustest.NewHost(t)
	_, err := appconfig.InPod(h.FS, "10.0.0.1", "443")
	require.ErrorContains(t, err, "CA")

	h.WriteFile(appconfig.ServiceAccountDir+"ca.crt", []byte("not PEM"))
	_, err = appconfig.InPod(h.FS, "10.0.0.1", "443")
	require.ErrorContains(t, err, "ca.crt holds no PEM certificate")
}

func TestFromKubeconfigUsesItsEmbeddedData(t *testing.T) {
	h := humustest.NewHost(t)
	ca, _ := selfSigned(t)
	cert, key := selfSigned(t)
	writeKubeconfig(t, h, "home/dev/.kube/config", &clientcmdapi.Cluster{
		Server: "https://127.0.0.1:6443", CertificateAuthorityData: ca,
	}, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key, Token: "secret"})

	conn, err := appconfig.FromKubeconfig(h.FS, "/home/dev/.kube/config", "")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:6443", conn.Server)
	require.NotNil(t, conn.TLS.RootCAs)
	require.Len(t, conn.TLS.Certificates, 1)
	tok, err := conn.Token(t.Context())
	require.NoError(t, err)
	require.Equal(t, "secret", tok)
}

func TestFromKubeconfigReadsTheFilesItNamesThroughTheFS(t *testing.T) {
	h := humustest.NewHost(t)
	ca, _ := selfSigned(t)
	h.WriteFile("home/dev/.kube/ca.crt", ca)
	h.WriteFile("run/token", []byte("from-a-file\n"))
	writeKubeconfig(t, h, "home/dev/.kube/config", &clientcmdapi.Cluster{
		Server: "https://k8s.example.com", CertificateAuthority: "ca.crt",
	}, &clientcmdapi.AuthInfo{TokenFile: "/run/token"})

	conn, err := appconfig.FromKubeconfig(h.FS, "/home/dev/.kube/config", "")
	require.NoError(t, err)
	require.Equal(t, "k8s.example.com:443", conn.Server)
	require.NotNil(t, conn.TLS.RootCAs)
	tok, err := conn.Token(t.Context())
	require.NoError(t, err)
	require.Equal(t, "from-a-file", tok)
}

func TestFromKubeconfigRejectsWhatItLeavesToTheEndUser(t *testing.T) {
	h := humustest.NewHost(t)
	writeKubeconfig(t, h, "kubeconfig", &clientcmdapi.Cluster{Server: "http://127.0.0.1:8080"},
		&clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "gke-gcloud-auth-plugin"}})

	_, err := appconfig.FromKubeconfig(h.FS, "/kubeconfig", "")
	require.ErrorContains(t, err, "the scheme must be https")
	require.ErrorContains(t, err, "exec credential plugins are not supported")

	_, err = appconfig.FromKubeconfig(h.FS, "/kubeconfig", "other")
	require.ErrorContains(t, err, `no context "other"`)

	_, err = appconfig.FromKubeconfig(h.FS, "kubeconfig", "")
	require.ErrorContains(t, err, "must be absolute")

	// A missing file is named as KUBECONFIG names it, not only as the FS
	// does ("open home/dev/missing").
	_, err = appconfig.FromKubeconfig(h.FS, "/home/dev/missing", "")
	require.ErrorContains(t, err, "reading kubeconfig /home/dev/missing: open home/dev/missing")
}

func TestReadNamesEveryMissingVariable(t *testing.T) {
	h := humustest.NewHost(t)
	_, err := appconfig.Read(t.Context(), &humus.Setup{Host: h.Host}, "memcached-controller")
	for _, v := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE", "POD_NAME"} {
		require.ErrorContains(t, err, v)
	}
}

func TestReadNamesAMalformedValue(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	h.SetEnv("KUBERNETES_SERVICE_PORT", "443")
	h.SetEnv("POD_NAMESPACE", "memcached-system")
	h.SetEnv("POD_NAME", "memcached-controller-0")
	h.SetEnv("LEASE_DURATION", "fifteen seconds")
	h.SetEnv("WORKERS", "two")
	h.SetEnv("SHARDING", "yes")
	h.SetEnv("SHARDING_CACHE", "some")
	_, err := appconfig.Read(t.Context(), &humus.Setup{Host: h.Host}, "memcached-controller")
	require.ErrorContains(t, err, "LEASE_DURATION")
	require.ErrorContains(t, err, "WORKERS")
	require.ErrorContains(t, err, "SHARDING: ")
	require.ErrorContains(t, err, `SHARDING_CACHE is "some": it is all`)
}

func TestReadRefusesACacheShareWithoutSharding(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	h.SetEnv("KUBERNETES_SERVICE_PORT", "443")
	h.SetEnv("POD_NAMESPACE", "memcached-system")
	h.SetEnv("POD_NAME", "memcached-controller-0")
	h.SetEnv("SHARDING_CACHE", "share")
	_, err := appconfig.Read(t.Context(), &humus.Setup{Host: h.Host}, "memcached-controller")
	require.ErrorContains(t, err, `SHARDING_CACHE is "share" but SHARDING is not true`)
}

func TestReadInAPod(t *testing.T) {
	h := humustest.NewHost(t)
	ca, _ := selfSigned(t)
	h.WriteFile(appconfig.ServiceAccountDir+"ca.crt", ca)
	h.WriteFile(appconfig.ServiceAccountDir+"token", []byte("token"))
	h.SetEnv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	h.SetEnv("KUBERNETES_SERVICE_PORT", "443")
	h.SetEnv("POD_NAMESPACE", "memcached-system")
	h.SetEnv("POD_NAME", "memcached-controller-0")
	h.SetEnv("RETRY_PERIOD", "1s")
	h.SetEnv("WATCH_TIMEOUT", "5s")
	h.SetEnv("SHARDING", "true")
	h.SetEnv("SHARDING_CACHE", "share")

	cfg, err := appconfig.Read(t.Context(), &humus.Setup{Host: h.Host}, "memcached-controller")
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:443", cfg.Connection.Server)
	want := kube.DefaultSettings()
	want.Name = "memcached-controller"
	want.LeaderElection.Namespace = "memcached-system"
	want.LeaderElection.Identity = "memcached-controller-0"
	want.LeaderElection.RetryPeriod = time.Second
	want.WatchTimeout = 5 * time.Second
	want.Sharding.Enabled = true
	want.Sharding.CacheShare = true
	require.Equal(t, want, cfg.Settings)
	require.Equal(t, ":8081", cfg.ProbesAddr)
}

// writeKubeconfig writes a kubeconfig of one context, current, to name.
func writeKubeconfig(t *testing.T, h *humustest.Host, name string, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = cluster
	cfg.AuthInfos["u"] = user
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	b, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	h.WriteFile(name, b)
}

// selfSigned returns a self-signed certificate's PEM and its key's PEM.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func TestBuildTelemetryWritesInfoRecordsToStderrAndDropsDebug(t *testing.T) {
	h := humustest.NewHost(t)
	tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.NoError(t, err)
	logger := tel.LoggerProvider.Logger("test")
	for _, r := range []struct {
		sev  otellog.Severity
		body string
	}{{otellog.SeverityDebug, "request body"}, {otellog.SeverityInfo, "Successfully acquired lease"}} {
		var rec otellog.Record
		rec.SetSeverity(r.sev)
		rec.SetBody(attribute.StringValue(r.body))
		logger.Emit(t.Context(), rec)
	}
	require.NoError(t, tel.Shutdown(t.Context()))
	require.Contains(t, h.StderrString(), "Successfully acquired lease")
	require.NotContains(t, h.StderrString(), "request body")
}

func TestBuildTelemetryWithoutAnEndpointExportsNoTracesAndServesMetrics(t *testing.T) {
	h := humustest.NewHost(t)
	tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.NoError(t, err)
	require.Nil(t, tel.TracerProvider, "no endpoint, no traces")
	counter, err := tel.MeterProvider.Meter("test").Int64Counter("test.widgets", metric.WithUnit("{widget}"))
	require.NoError(t, err)
	counter.Add(t.Context(), 3)

	rec := httptest.NewRecorder()
	appconfig.MetricsHandler(tel).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, appconfig.MetricsPath, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "test_widgets_total")
	require.NoError(t, tel.Shutdown(t.Context()))

	// Another Telemetry, such as a test's, has no registry to serve.
	rec = httptest.NewRecorder()
	appconfig.MetricsHandler(humus.Telemetry{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, appconfig.MetricsPath, nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
}

func TestBuildTelemetryWithAnEndpointTraces(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv(appconfig.EnvOTLPEndpoint, "http://127.0.0.1:1")
	tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.NoError(t, err)
	require.NotNil(t, tel.TracerProvider)
	require.NotNil(t, tel.Propagator)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx) // nothing listens: the flush may fail, but returns
}

func TestBuildTelemetryNamesEveryMalformedVariable(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv(appconfig.EnvOTLPEndpoint, "otel-collector:4318")
	h.SetEnv(appconfig.EnvOTLPLogsEndpoint, "ftp://x")
	h.SetEnv(appconfig.EnvOTLPHeaders, "novalue")
	h.SetEnv(appconfig.EnvOTLPProtocol, "grpc")
	h.SetEnv(appconfig.EnvLogFormat, "pretty")
	_, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	for _, v := range []string{appconfig.EnvOTLPEndpoint, appconfig.EnvOTLPLogsEndpoint, appconfig.EnvOTLPHeaders, appconfig.EnvOTLPProtocol, appconfig.EnvLogFormat} {
		require.ErrorContains(t, err, v)
	}
}

func TestBuildTelemetryNamesABadEndpointOnceAsItWasSet(t *testing.T) {
	// It was named once a signal, with the signal's path added:
	// OTEL_EXPORTER_OTLP_ENDPOINT is "otel-collector:4318/v1/traces", then
	// "otel-collector:4318/v1/logs".
	h := humustest.NewHost(t)
	h.SetEnv(appconfig.EnvOTLPEndpoint, "otel-collector:4318")
	_, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.EqualError(t, err, `OTEL_EXPORTER_OTLP_ENDPOINT is "otel-collector:4318": it is an http or https URL, such as http://otel-collector:4318`)

	// Unused, as each signal has its own, it isn't checked.
	h.SetEnv(appconfig.EnvOTLPTracesEndpoint, "http://tempo:4318/v1/traces")
	h.SetEnv(appconfig.EnvOTLPLogsEndpoint, "http://loki:4318/otlp/v1/logs")
	tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.NoError(t, err)
	require.NoError(t, tel.Shutdown(t.Context()))
}

func TestConsoleFormatIsOneReadableLineARecord(t *testing.T) {
	h := humustest.NewHost(t)
	h.SetEnv(appconfig.EnvLogFormat, "console")
	tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
	require.NoError(t, err)
	var rec otellog.Record
	rec.SetSeverity(otellog.SeverityWarn)
	rec.SetSeverityText("WARN")
	rec.SetBody(attribute.StringValue("reconcile failed"))
	rec.AddAttributes(attribute.String("humus.kube.object.name", "cache"), attribute.String("error", "no space left"))
	tel.LoggerProvider.Logger("test").Emit(t.Context(), rec)
	require.NoError(t, tel.Shutdown(t.Context()))
	out := h.StderrString()
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d\d\dZ WARN  reconcile failed humus.kube.object.name=cache error="no space left"\n$`, out)
}

// TestEveryLogFormatWritesRFC3339TimesAndTheSpansIDs emits a record made
// in a span through each LOG_FORMAT: its time is RFC 3339, and it carries
// the span's trace and span ids.
func TestEveryLogFormatWritesRFC3339TimesAndTheSpansIDs(t *testing.T) {
	traceID, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	spanID, err := trace.SpanIDFromHex("b7ad6b7169203331")
	require.NoError(t, err)
	ctx := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	at := time.Date(2026, 12, 2, 3, 4, 5, 600_000_000, time.UTC)
	for format, want := range map[string][]string{
		"json": {`"Timestamp":"2026-12-02T03:04:05.6Z"`, `"TraceID":"0af7651916cd43dd8448eb211c80319c"`, `"SpanID":"b7ad6b7169203331"`},
		"console": {"2026-12-02T03:04:05.600Z INFO  reconciled humus.kube.object.name=cache " +
			"trace_id=0af7651916cd43dd8448eb211c80319c span_id=b7ad6b7169203331\n"},
	} {
		t.Run(format, func(t *testing.T) {
			h := humustest.NewHost(t)
			h.SetEnv(appconfig.EnvLogFormat, format)
			tel, err := appconfig.BuildTelemetry(t.Context(), h.Host)
			require.NoError(t, err)
			var rec otellog.Record
			rec.SetTimestamp(at)
			rec.SetSeverity(otellog.SeverityInfo)
			rec.SetSeverityText("INFO")
			rec.SetBody(attribute.StringValue("reconciled"))
			rec.AddAttributes(attribute.String("humus.kube.object.name", "cache"))
			tel.LoggerProvider.Logger("test").Emit(ctx, rec)
			require.NoError(t, tel.Shutdown(t.Context()))
			for _, w := range want {
				require.Contains(t, h.StderrString(), w)
			}
		})
	}
}
