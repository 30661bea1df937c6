package humustest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/z5labs/humus"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Telemetry is an in-memory humus.Telemetry. Its embedded humus.Telemetry
// holds OpenTelemetry SDK providers that keep every ended span, every log
// record and every instrument's data for the test to read, and a W3C
// TraceContext propagator. Its methods are safe for concurrent use.
//
// Its Shutdown only flushes and counts the call (see Shutdowns), so that a
// test can still read what an App recorded after the App has exited; the
// providers are shut down when the test ends.
type Telemetry struct {
	humus.Telemetry

	t         testing.TB
	spans     *tracetest.SpanRecorder
	reader    *sdkmetric.ManualReader
	records   *recordProcessor
	mu        sync.Mutex
	shutdowns int
}

// NewTelemetry returns an in-memory Telemetry, whose providers are shut down
// when the test ends. It starts no goroutine: spans and log records are kept
// synchronously, and metrics are collected only when Metrics is called.
func NewTelemetry(t testing.TB) *Telemetry {
	t.Helper()
	tel := &Telemetry{
		t:       t,
		spans:   tracetest.NewSpanRecorder(),
		reader:  sdkmetric.NewManualReader(),
		records: &recordProcessor{},
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(tel.records))
	tel.Telemetry = humus.Telemetry{
		TracerProvider: tp,
		MeterProvider:  mp,
		LoggerProvider: lp,
		Propagator:     propagation.TraceContext{},
		Shutdown: func(ctx context.Context) error {
			tel.mu.Lock()
			tel.shutdowns++
			tel.mu.Unlock()
			return errors.Join(tp.ForceFlush(ctx), lp.ForceFlush(ctx))
		},
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx), lp.Shutdown(ctx)); err != nil {
			t.Errorf("humustest: shutting down telemetry: %v", err)
		}
	})
	return tel
}

// Build returns t's humus.Telemetry, so that humus.WithTelemetry(t.Build)
// makes an App record into t.
func (t *Telemetry) Build(context.Context, humus.Host) (humus.Telemetry, error) {
	return t.Telemetry, nil
}

// Spans returns every span ended so far, in the order they ended.
func (t *Telemetry) Spans() []sdktrace.ReadOnlySpan {
	return t.spans.Ended()
}

// Metrics collects and returns every instrument's data now. A collection
// error fails the test.
func (t *Telemetry) Metrics() metricdata.ResourceMetrics {
	t.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := t.reader.Collect(context.Background(), &rm); err != nil {
		t.t.Errorf("humustest: collecting metrics: %v", err)
	}
	return rm
}

// Metric collects every instrument's data now, as Metrics does, and
// returns that of the instrument named name from the meter named scope,
// such as "github.com/z5labs/humus/kube", and whether there is one. An
// instrument that has recorded nothing yet isn't there.
func (t *Telemetry) Metric(scope, name string) (metricdata.Metrics, bool) {
	t.t.Helper()
	for _, sm := range t.Metrics().ScopeMetrics {
		if sm.Scope.Name != scope {
			continue
		}
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// Records returns every log record emitted so far, in order.
func (t *Telemetry) Records() []sdklog.Record {
	return t.records.all()
}

// Shutdowns returns how many times the embedded Telemetry's Shutdown has
// been called.
func (t *Telemetry) Shutdowns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shutdowns
}

// recordProcessor is a synchronous sdklog.Processor that keeps a copy of
// every record.
type recordProcessor struct {
	mu      sync.Mutex
	records []sdklog.Record
}

func (p *recordProcessor) OnEmit(_ context.Context, r *sdklog.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = append(p.records, r.Clone())
	return nil
}

func (p *recordProcessor) all() []sdklog.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sdklog.Record(nil), p.records...)
}

func (*recordProcessor) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (*recordProcessor) Shutdown(context.Context) error                         { return nil }
func (*recordProcessor) ForceFlush(context.Context) error                       { return nil }
