package kube

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/z5labs/humus/humustest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newOutcomeController is a Controller of the widgets "ok", "fails" and
// "panics", reconciled by outcomeReconciler with in-memory telemetry, and
// retried only after an hour.
func newOutcomeController(t *testing.T) (*humustest.Telemetry, *Controller) {
	t.Helper()
	f := newFakeCluster(t, newWidget("ok", 1), newWidget("fails", 2), newWidget("panics", 3))
	tel := humustest.NewTelemetry(t)
	settings := testSettings()
	settings.RetryBaseDelay = time.Hour
	settings.RetryMaxDelay = time.Hour
	return tel, newWidgetController(t, f, tel.Telemetry, settings, outcomeReconciler())
}

// outcomeReconciler succeeds for "ok", fails for "fails" and panics for
// "panics".
func outcomeReconciler() Reconciler[widgetSpec, widgetStatus] {
	return ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
		switch w.Name {
		case "fails":
			return Result[widgetStatus]{}, errors.New("the cloud is down")
		case "panics":
			panic("index out of range")
		}
		return Result[widgetStatus]{}, nil
	})
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

func TestEveryReconcileIsARootSpanWithRecordsForErrorsAndPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel, c := newOutcomeController(t)
		s := serve(t, c)
		synctest.Wait()
		require.NoError(t, s.stop(t))

		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, sp := range tel.Spans() {
			if sp.Name() != "reconcile Widget" {
				continue
			}
			require.Equal(t, instrumentationScope, sp.InstrumentationScope().Name)
			require.False(t, sp.Parent().IsValid(), "a reconcile is a root span")
			a := spanAttrs(sp)
			require.Equal(t, testNamespace, a["k8s.namespace.name"])
			spans[a["humus.kube.object.name"]] = sp
		}
		require.Len(t, spans, 3)
		require.Equal(t, codes.Unset, spans["ok"].Status().Code)
		require.Equal(t, codes.Error, spans["fails"].Status().Code)
		require.Contains(t, spans["fails"].Status().Description, "the cloud is down")
		require.Equal(t, codes.Error, spans["panics"].Status().Code)
		events := spans["panics"].Events()
		require.Len(t, events, 1)
		require.Equal(t, "exception", events[0].Name)
		ev := map[string]string{}
		for _, kv := range events[0].Attributes {
			ev[string(kv.Key)] = kv.Value.Emit()
		}
		require.Equal(t, "string", ev["exception.type"])
		require.Equal(t, "index out of range", ev["exception.message"])
		require.Contains(t, ev["exception.stacktrace"], "outcomeReconciler")

		failed := recordsWithBody(tel, "reconcile failed")
		require.Len(t, failed, 1)
		require.Equal(t, otellog.SeverityWarn, failed[0].Severity())
		require.Equal(t, map[string]string{
			"k8s.namespace.name":         testNamespace,
			"humus.kube.object.name":     "fails",
			"humus.kube.controller.name": controllerName,
			"exception.message":          "the cloud is down",
			"exception.type":             "*errors.errorString",
		}, attrs(failed[0]))
		require.Equal(t, spans["fails"].SpanContext().TraceID(), failed[0].TraceID(), "in the span's context")
		require.Equal(t, spans["fails"].SpanContext().SpanID(), failed[0].SpanID())

		panicked := recordsWithBody(tel, "reconcile panicked")
		require.Len(t, panicked, 1)
		require.Equal(t, otellog.SeverityError, panicked[0].Severity())
		pa := attrs(panicked[0])
		require.Equal(t, "panics", pa["humus.kube.object.name"])
		require.Equal(t, "string", pa["exception.type"])
		require.Equal(t, "index out of range", pa["exception.message"])
		require.Contains(t, pa["exception.stacktrace"], "outcomeReconciler")
		require.Equal(t, spans["panics"].SpanContext().SpanID(), panicked[0].SpanID())
	})
}

func TestTheSixInstruments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel, c := newOutcomeController(t)
		s := serve(t, c)
		synctest.Wait()
		time.Sleep(time.Second) // the queue records its two gauges every 500ms
		synctest.Wait()

		want := []struct {
			name, unit, description string
		}{
			{"humus.kube.controller.queue.depth", "{object}", "Objects waiting in the work queue for a worker."},
			{"humus.kube.controller.queue.adds", "{object}", "Objects added to the work queue, not counting one already waiting."},
			{"humus.kube.controller.queue.duration", "s", "How long an object waited in the work queue for a worker."},
			{"humus.kube.controller.reconcile.duration", "s", "How long each reconcile took, by its outcome."},
			{"humus.kube.controller.reconcile.unfinished_duration", "s", "How long the reconciles in flight have run, added together."},
			{"humus.kube.controller.reconcile.longest_unfinished_duration", "s", "How long the longest reconcile in flight has run."},
		}
		buckets := []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
		got := map[string]metricdata.Metrics{}
		for _, w := range want {
			m, ok := tel.Metric(instrumentationScope, w.name)
			require.True(t, ok, w.name)
			require.Equal(t, w.unit, m.Unit, w.name)
			require.Equal(t, w.description, m.Description, w.name)
			got[w.name] = m
		}

		depth, ok := got["humus.kube.controller.queue.depth"].Data.(metricdata.Sum[int64])
		require.True(t, ok, "queue.depth is an Int64UpDownCounter")
		require.False(t, depth.IsMonotonic)
		require.Len(t, depth.DataPoints, 1)
		require.EqualValues(t, 0, depth.DataPoints[0].Value, "every key taken")

		adds, ok := got["humus.kube.controller.queue.adds"].Data.(metricdata.Sum[int64])
		require.True(t, ok, "queue.adds is an Int64Counter")
		require.True(t, adds.IsMonotonic)
		require.EqualValues(t, 3, adds.DataPoints[0].Value)

		for _, name := range []string{"humus.kube.controller.queue.duration", "humus.kube.controller.reconcile.duration"} {
			h, ok := got[name].Data.(metricdata.Histogram[float64])
			require.True(t, ok, name+" is a Float64Histogram")
			for _, dp := range h.DataPoints {
				require.Equal(t, buckets, dp.Bounds, name)
			}
		}
		reconciles, _ := got["humus.kube.controller.reconcile.duration"].Data.(metricdata.Histogram[float64])
		outcomes := map[string]uint64{}
		for _, dp := range reconciles.DataPoints {
			require.Equal(t, 2, dp.Attributes.Len(), "the controller's name and the outcome, nothing per object")
			name, _ := dp.Attributes.Value(attrController)
			require.Equal(t, controllerName, name.AsString())
			outcome, _ := dp.Attributes.Value("humus.kube.controller.reconcile.outcome")
			outcomes[outcome.AsString()] += dp.Count
		}
		require.Equal(t, map[string]uint64{"success": 1, "error": 1, "panic": 1}, outcomes)

		for _, name := range []string{"humus.kube.controller.reconcile.unfinished_duration", "humus.kube.controller.reconcile.longest_unfinished_duration"} {
			g, ok := got[name].Data.(metricdata.Gauge[float64])
			require.True(t, ok, name+" is a Float64Gauge")
			require.Len(t, g.DataPoints, 1)
			require.Zero(t, g.DataPoints[0].Value, "nothing in flight")
		}

		// humus.kube.controller.name on every data point, and nothing that
		// names an object.
		for name, m := range got {
			for _, set := range attributeSets(m) {
				v, ok := set.Value(attrController)
				require.True(t, ok, name)
				require.Equal(t, controllerName, v.AsString(), name)
				for _, kv := range set.ToSlice() {
					require.NotContains(t, []attribute.Key{"k8s.namespace.name", "humus.kube.object.name"}, kv.Key, name)
				}
			}
		}
		require.NoError(t, s.stop(t))
	})
}

// attributeSets returns the attributes of each of m's data points.
func attributeSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

func sumValue(t testing.TB, tel *humustest.Telemetry, name string) int64 {
	t.Helper()
	m, ok := tel.Metric(instrumentationScope, name)
	if !ok {
		return 0
	}
	var v int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v += dp.Value
	}
	return v
}

func reconcileCount(t testing.TB, tel *humustest.Telemetry) uint64 {
	t.Helper()
	m, ok := tel.Metric(instrumentationScope, "humus.kube.controller.reconcile.duration")
	if !ok {
		return 0
	}
	var n uint64
	for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		n += dp.Count
	}
	return n
}

func TestQueueDepthCountsUpAndDownAndAStandbyHoldsItsKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1), newWidget("w2", 2), newWidget("w3", 3))
		release := make(chan struct{})
		rec := ReconcilerFunc[widgetSpec, widgetStatus](func(ctx context.Context, w widget) (Result[widgetStatus], error) {
			<-release
			return Result[widgetStatus]{}, nil
		})
		leaderTel, standbyTel := humustest.NewTelemetry(t), humustest.NewTelemetry(t)
		leader := newWidgetController(t, f, leaderTel.Telemetry, testSettings(), rec)
		sl := serve(t, leader)
		synctest.Wait()
		require.EqualValues(t, 2, sumValue(t, leaderTel, "humus.kube.controller.queue.depth"), "up by 3, down by the 1 key the worker took")

		settings := testSettings()
		settings.LeaderElection.Identity = "replica-2"
		standby := newWidgetController(t, f, standbyTel.Telemetry, settings, rec)
		ss := serve(t, standby)
		synctest.Wait()

		close(release)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.EqualValues(t, 0, sumValue(t, leaderTel, "humus.kube.controller.queue.depth"), "down to 0 once every key is taken")
		require.EqualValues(t, 3, reconcileCount(t, leaderTel))
		require.EqualValues(t, 3, sumValue(t, standbyTel, "humus.kube.controller.queue.depth"), "a standby's queue holds a key for every object")
		require.EqualValues(t, 0, reconcileCount(t, standbyTel), "a standby reconciles nothing")
		for _, name := range []string{"humus.kube.controller.reconcile.unfinished_duration", "humus.kube.controller.reconcile.longest_unfinished_duration"} {
			m, ok := standbyTel.Metric(instrumentationScope, name)
			require.True(t, ok)
			for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
				require.Zero(t, dp.Value, "a standby's gauges read 0")
			}
		}

		require.NoError(t, sl.stop(t))
		time.Sleep(5 * time.Second) // a RetryPeriod of 2s, jittered by up to 1.2 of it
		synctest.Wait()
		require.EqualValues(t, 0, sumValue(t, standbyTel, "humus.kube.controller.queue.depth"), "the new leader takes its keys")
		require.EqualValues(t, 3, reconcileCount(t, standbyTel))
		require.NoError(t, ss.stop(t))
	})
}

func TestClientGosRecordsReachTheLoggerProviderAndNothingReachesStderr(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	restore := func() string {
		os.Stderr = stderr
		w.Close()
		return <-captured
	}
	defer func() {
		if os.Stderr == w {
			restore()
		}
	}()

	tel := humustest.NewTelemetry(t)
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, tel.Telemetry, testSettings(), outcomeReconciler())
		s := serve(t, c)
		synctest.Wait()
		f.stealLease(t) // leader election's error paths log too
		<-s.done
		require.ErrorIs(t, s.err, ErrLostLeadership)
	})

	require.Empty(t, restore(), "nothing reaches the real stderr")
	var bodies []string
	for _, rec := range tel.Records() {
		bodies = append(bodies, rec.Body().AsString())
	}
	joined := strings.Join(bodies, "\n")
	require.Contains(t, joined, "Attempting to acquire leader lease")
	require.Contains(t, joined, "Successfully acquired lease")
	require.Contains(t, joined, "Failed to renew lease")
}

func TestClientGosVerboseRecordsAreDropped(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		c := newWidgetController(t, f, tel.Telemetry, testSettings(), outcomeReconciler())
		s := serve(t, c)
		time.Sleep(time.Minute) // 30 Lease renewals, each a V(5) record
		synctest.Wait()
		require.NoError(t, s.stop(t))
	})
	for _, rec := range tel.Records() {
		require.NotContains(t, rec.Body().AsString(), "Successfully renewed lease")
		require.GreaterOrEqual(t, rec.Severity(), otellog.SeverityInfo, rec.Body().AsString())
	}
}

func TestClientGoVerbosityPassesClientGosRecordsUpToItsLevel(t *testing.T) {
	tel := humustest.NewTelemetry(t)
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster(t, newWidget("w1", 1))
		settings := testSettings()
		settings.ClientGoVerbosity = 5
		c := newWidgetController(t, f, tel.Telemetry, settings, outcomeReconciler())
		s := serve(t, c)
		time.Sleep(5 * time.Second) // Lease renewals, each a V(5) record
		synctest.Wait()
		require.NoError(t, s.stop(t))
	})
	renewed := recordsWithBody(tel, "Successfully renewed lease")
	require.NotEmpty(t, renewed)
	require.Equal(t, otellog.SeverityTrace4, renewed[0].Severity(), "V(5) is TRACE4")
}
