//go:build controlplane

package app_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/z5labs/humus"
	"github.com/z5labs/humus/controlplane/apptest"
	"github.com/z5labs/humus/controlplane/controlplanetest"
	"github.com/z5labs/humus/kube/examples/appconfig"
	"github.com/z5labs/humus/kube/examples/memcached/app"
)

// The controller's six instruments, under the Prometheus names the docs
// list, and otelhttp's client request duration.
var (
	controllerMetrics = []string{
		"humus_kube_controller_queue_depth",
		"humus_kube_controller_queue_adds_total",
		"humus_kube_controller_queue_duration_seconds",
		"humus_kube_controller_reconcile_duration_seconds",
		"humus_kube_controller_reconcile_unfinished_duration_seconds",
		"humus_kube_controller_reconcile_longest_unfinished_duration_seconds",
	}
	clientMetric = "http_client_request_duration_seconds"
)

// testExportsMetricsAndTraces runs the App with its own BuildTelemetry, as
// cmd/memcached does, with OTEL_EXPORTER_OTLP_ENDPOINT naming a receiver of
// the test's own: its /metrics, served over plain HTTP on loopback as a
// local run serves them (METRICS_SECURE=false), parse with Prometheus' own
// parser and hold the six instruments and otelhttp's, and the receiver
// gets reconcile Memcached root spans whose children are its API requests.
func testExportsMetricsAndTraces(t *testing.T, e apptest.Env) {
	ns := e.Namespace(t, "telemetry")
	recv := newOTLPReceiver(t)
	probes, metrics := controlplanetest.FreeAddr(t), controlplanetest.FreeAddr(t)
	host := humus.OSHost()
	host.LookupEnv = apptest.LookupEnv(map[string]string{
		appconfig.EnvKubeconfig:    abs(t, e.Cluster.Kubeconfig),
		appconfig.EnvPodNamespace:  ns,
		appconfig.EnvPodName:       "laptop",
		appconfig.EnvWatchNS:       ns,
		appconfig.EnvProbesAddr:    probes,
		appconfig.EnvMetricsAddr:   metrics,
		appconfig.EnvMetricsSecure: "false",
		appconfig.EnvOTLPEndpoint:  recv.URL,
		appconfig.EnvServiceName:   "memcached-controller",
	})
	a := apptest.Start(t, app.Init, host, humus.WithTelemetry(app.BuildTelemetry))
	controlplanetest.Ready(t, probes)
	memcacheds := e.Dynamic.Resource(app.Memcached.GVR()).Namespace(ns)
	createMemcached(t, memcacheds, "cache", 1)
	waitReconciled(t, memcacheds, "cache")

	t.Run("MetricsAreServedOnLoopbackInPrometheusTextFormat", func(t *testing.T) {
		// Not on the probes' listener, which a pod serves to anyone.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+probes+appconfig.MetricsPath, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode)

		// The two unfinished-duration gauges are first set by the work
		// queue's own update loop, every 500ms after the queue starts, so
		// a scrape is awaited until it holds every family.
		var families map[string]*dto.MetricFamily
		controlplanetest.Eventually(t, 10*time.Second, "every controller metric on /metrics", func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metrics+appconfig.MetricsPath, nil)
			if err != nil {
				return false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("GET %s: %s", appconfig.MetricsPath, resp.Status)
			}
			parser := expfmt.NewTextParser(model.LegacyValidation)
			if families, err = parser.TextToMetricFamilies(resp.Body); err != nil {
				return false, err
			}
			for _, name := range controllerMetrics {
				if _, ok := families[name]; !ok {
					return false, nil
				}
			}
			return true, nil
		})
		for _, name := range controllerMetrics {
			f, ok := families[name]
			require.True(t, ok, "the family %s", name)
			require.NotEmpty(t, f.GetMetric(), name)
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				require.Equal(t, app.FieldManager, labels["humus_kube_controller_name"], name)
			}
		}
		f, ok := families[clientMetric]
		require.True(t, ok, "otelhttp's %s", clientMetric)
		require.NotEmpty(t, f.GetMetric())
	})

	deleteMemcached(t, memcacheds, "cache")
	// Terminating flushes the batched spans.
	require.Equal(t, 0, a.Terminate(t))

	t.Run("ReconcileRootSpansHaveTheAPIRequestsAsChildren", func(t *testing.T) {
		spans := recv.spans()
		roots := map[string]bool{}
		for _, s := range spans {
			if s.GetName() == reconcileSpan && len(s.GetParentSpanId()) == 0 {
				roots[hex.EncodeToString(s.GetSpanId())] = true
			}
		}
		require.NotEmpty(t, roots, "reconcile Memcached root spans among %d", len(spans))
		children := 0
		for _, s := range spans {
			if roots[hex.EncodeToString(s.GetParentSpanId())] && s.GetKind() == tracepb.Span_SPAN_KIND_CLIENT {
				children++
			}
		}
		require.Positive(t, children, "client spans of the API requests under the reconciles")
		// The informers' lists are root spans of their own; the Lease's
		// renewals, every RetryPeriod, and the Event POSTs are not spans.
		for _, s := range spans {
			if len(s.GetParentSpanId()) != 0 {
				continue
			}
			for _, kv := range s.GetAttributes() {
				if kv.GetKey() == "url.full" {
					u := kv.GetValue().GetStringValue()
					require.NotContains(t, u, "/leases", "a Lease request is no root span")
					require.NotContains(t, u, "events.k8s.io", "an Event request is no root span")
				}
			}
		}
		t.Logf("%d spans, %d reconcile roots, %d API requests under them", len(spans), len(roots), children)
	})
}

// otlpReceiver is an OTLP/HTTP receiver of traces, in protobuf, that keeps
// every span it is sent; logs are accepted and dropped.
type otlpReceiver struct {
	URL string

	mu   sync.Mutex
	got  []*tracepb.Span
	errs []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.URL.Path == "/v1/traces" {
			var msg coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &msg); err != nil {
				r.mu.Lock()
				r.errs = append(r.errs, err.Error())
				r.mu.Unlock()
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			for _, rs := range msg.GetResourceSpans() {
				for _, ss := range rs.GetScopeSpans() {
					r.got = append(r.got, ss.GetSpans()...)
				}
			}
			r.mu.Unlock()
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = io.Copy(w, bytes.NewReader(out))
			return
		}
		if strings.HasPrefix(req.URL.Path, "/v1/") {
			w.Header().Set("Content-Type", "application/x-protobuf")
			return
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Empty(t, r.errs, "the receiver decoded every export")
	})
	return r
}

func (r *otlpReceiver) spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.got...)
}
