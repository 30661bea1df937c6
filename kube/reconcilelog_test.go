package kube

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// TestARecordMadeInAReconcileCarriesItsObjectControllerAndSpan reads the
// records a Reconciler makes through klog.FromContext, LoggerFrom, and
// LoggerFrom in a child span of its own: each carries the object, the
// controller and its span's ids, and its times as RFC 3339 strings.
func TestARecordMadeInAReconcileCarriesItsObjectControllerAndSpan(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 600_000_000, time.UTC)
	tel := humustest.NewTelemetry(t)
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			klog.FromContext(ctx).Info("through klog", "at", at)
			LoggerFrom(ctx).Info("through slog", slog.Any("at", metav1.NewTime(at)), slog.Group("g", slog.Time("at", at)))
			child, span := tel.TracerProvider.Tracer("test").Start(ctx, "child")
			LoggerFrom(ctx).InfoContext(child, "in a child span")
			span.End()
			return Result[widgetStatus]{}, nil
		})
		c := newWidgetController(t, f, tel.Telemetry, testSettings(), rec)
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, s.stop(t))
	})

	var root, child sdktrace.ReadOnlySpan
	for _, sp := range tel.Spans() {
		switch sp.Name() {
		case "reconcile Widget":
			root = sp
		case "child":
			child = sp
		}
	}
	require.NotNil(t, root)
	require.NotNil(t, child)
	want := map[string]string{
		"k8s.namespace.name":         testNamespace,
		"humus.kube.object.name":     "w1",
		"humus.kube.controller.name": controllerName,
	}
	records := map[string]sdklog.Record{}
	for _, r := range tel.Records() {
		records[r.Body().AsString()] = r
	}
	for body, span := range map[string]sdktrace.ReadOnlySpan{"through klog": root, "through slog": root, "in a child span": child} {
		r, ok := records[body]
		require.True(t, ok, "no record %q", body)
		a := attrs(r)
		for k, v := range want {
			require.Equal(t, v, a[k], "%s: %s", body, k)
		}
		require.Equal(t, span.SpanContext().TraceID(), r.TraceID(), body)
		require.Equal(t, span.SpanContext().SpanID(), r.SpanID(), body)
	}
	require.Equal(t, "2026-12-02T03:04:05.6Z", attrs(records["through klog"])["at"])
	require.Equal(t, "2026-12-02T03:04:05.6Z", attrs(records["through slog"])["at"])
	require.Contains(t, attrs(records["through slog"])["g"], "2026-12-02T03:04:05.6Z")
}

func TestLoggerFromOutsideAReconcileIsKlogs(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	h, err := newTelemetry(tel.Telemetry, "c", 0)
	require.NoError(t, err)
	ctx := klog.NewContext(t.Context(), h.Klog())
	LoggerFrom(ctx).Info("outside", "at", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	LoggerFrom(t.Context()) // klog's global logger: never nil
	records := tel.Records()
	require.Len(t, records, 1)
	require.Equal(t, "2026-01-02T03:04:05Z", attrs(records[0])["at"])
	require.NotContains(t, attrs(records[0]), "humus.kube.object.name")
}
