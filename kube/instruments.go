package kube

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"k8s.io/client-go/util/workqueue"
)

// durationBuckets are OpenTelemetry's advice for a duration in seconds, as
// http.server.request.duration takes. The SDK's default boundaries are for
// milliseconds.
func durationBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
}

// instruments are the controller's six instruments, under
// humus.kube.controller.
type instruments struct {
	queueDepth        metric.Int64UpDownCounter
	queueAdds         metric.Int64Counter
	queueDuration     metric.Float64Histogram
	reconcileDuration metric.Float64Histogram
	unfinished        metric.Float64Gauge
	longestUnfinished metric.Float64Gauge
}

// newInstruments creates the six instruments from m, and returns one error
// naming each that can't be created.
func newInstruments(m metric.Meter, name string) (*instruments, error) {
	var i instruments
	var err error
	var errs []error
	check := func(instrument string) {
		if err != nil {
			errs = append(errs, fmt.Errorf("kube: creating the instrument %s: %w", instrument, err))
		}
	}
	i.queueDepth, err = m.Int64UpDownCounter("humus.kube.controller.queue.depth",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects waiting in the work queue for a worker."))
	check("humus.kube.controller.queue.depth")
	i.queueAdds, err = m.Int64Counter("humus.kube.controller.queue.adds",
		metric.WithUnit("{object}"),
		metric.WithDescription("Objects added to the work queue, not counting one already waiting."))
	check("humus.kube.controller.queue.adds")
	i.queueDuration, err = m.Float64Histogram("humus.kube.controller.queue.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long an object waited in the work queue for a worker."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	check("humus.kube.controller.queue.duration")
	i.reconcileDuration, err = m.Float64Histogram("humus.kube.controller.reconcile.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long each reconcile took, by its outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets()...))
	check("humus.kube.controller.reconcile.duration")
	i.unfinished, err = m.Float64Gauge("humus.kube.controller.reconcile.unfinished_duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long the reconciles in flight have run, added together."))
	check("humus.kube.controller.reconcile.unfinished_duration")
	i.longestUnfinished, err = m.Float64Gauge("humus.kube.controller.reconcile.longest_unfinished_duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long the longest reconcile in flight has run."))
	check("humus.kube.controller.reconcile.longest_unfinished_duration")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &i, nil
}

// metricsProvider is the work queue's MetricsProvider: it records the
// queue's metrics with the controller's instruments. It is set in the
// queue's config, never with client-go's global workqueue.SetProvider.
// client-go hands it the queue's name, Settings.Name, which it records as
// humus.kube.controller.name.
type metricsProvider struct{ i *instruments }

var _ workqueue.MetricsProvider = metricsProvider{}

func controllerAttr(name string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(attrController, name)))
}

func (p metricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return depthMetric{c: p.i.queueDepth, attrs: controllerAttr(name)}
}

func (p metricsProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return addsMetric{c: p.i.queueAdds, attrs: controllerAttr(name)}
}

func (p metricsProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return histogramMetric{h: p.i.queueDuration, attrs: controllerAttr(name)}
}

func (p metricsProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gaugeMetric{g: p.i.unfinished, attrs: controllerAttr(name)}
}

func (p metricsProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return gaugeMetric{g: p.i.longestUnfinished, attrs: controllerAttr(name)}
}

// NewWorkDurationMetric is a no-op: it would time what
// humus.kube.controller.reconcile.duration times, without the outcome.
func (metricsProvider) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noopMetric{} }

// NewRetriesMetric is a no-op: the queue counts a retry on every AddAfter,
// so every Result.After would count as one. The error outcome counts the
// retries exactly.
func (metricsProvider) NewRetriesMetric(string) workqueue.CounterMetric { return noopMetric{} }

type depthMetric struct {
	c     metric.Int64UpDownCounter
	attrs metric.MeasurementOption
}

func (m depthMetric) Inc() { m.c.Add(context.Background(), 1, m.attrs) }
func (m depthMetric) Dec() { m.c.Add(context.Background(), -1, m.attrs) }

type addsMetric struct {
	c     metric.Int64Counter
	attrs metric.MeasurementOption
}

func (m addsMetric) Inc() { m.c.Add(context.Background(), 1, m.attrs) }

type histogramMetric struct {
	h     metric.Float64Histogram
	attrs metric.MeasurementOption
}

func (m histogramMetric) Observe(v float64) { m.h.Record(context.Background(), v, m.attrs) }

type gaugeMetric struct {
	g     metric.Float64Gauge
	attrs metric.MeasurementOption
}

func (m gaugeMetric) Set(v float64) { m.g.Record(context.Background(), v, m.attrs) }

type noopMetric struct{}

func (noopMetric) Inc()            {}
func (noopMetric) Observe(float64) {}
