package telemetry

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	otellog "go.opentelemetry.io/otel/log"
)

func TestClientGosRecordsAboveV8ArriveAsTrace(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	ct, err := New(tel.Telemetry, "widgets", 10)
	require.NoError(t, err)
	ct.klog.V(1).Info("v1")
	ct.klog.V(4).Info("v4")
	ct.klog.V(10).Info("v10")
	ct.klog.V(11).Info("v11")
	got := map[string]otellog.Severity{}
	for _, rec := range tel.Records() {
		got[rec.Body().AsString()] = rec.Severity()
	}
	require.Equal(t, map[string]otellog.Severity{
		"v1":  otellog.SeverityDebug4,
		"v4":  otellog.SeverityDebug,
		"v10": otellog.SeverityTrace,
	}, got)
}

// BenchmarkStartReconcile measures what each reconcile's telemetry costs
// before the Reconciler runs: its root span and, with it, the loggers its
// context carries (withLogger), on the in-memory telemetry.
func BenchmarkStartReconcile(b *testing.B) {
	tel := humustest.NewTelemetry(b)
	t, err := New(tel.Telemetry, "widgets", 0)
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, rec := t.StartReconcile(ctx, "Widget", "default/w1")
		rec.Succeeded()
	}
}
