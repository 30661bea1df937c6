package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/z5labs/humus/kube/internal/priorityqueue"
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

// AttrQueuePriority is the priority a key waited at in the work queue:
// "low" for a key queued by an informer's initial list, a resync, a
// retry or a delay, "normal" for one queued by a change
// (kube/internal/priorityqueue).
const AttrQueuePriority = "humus.kube.controller.queue.priority"

// QueueMetrics records the work queue's measures with the controller's
// instruments, under the controller's name and the key's priority.
type QueueMetrics struct {
	i           *instruments
	name        string
	low, normal metric.MeasurementOption
}

var _ priorityqueue.Metrics = (*QueueMetrics)(nil)

func newQueueMetrics(i *instruments, name string) *QueueMetrics {
	return &QueueMetrics{i: i, name: name, low: priorityAttrs(name, priorityqueue.Low), normal: priorityAttrs(name, priorityqueue.Normal)}
}

func priorityAttrs(name string, p priorityqueue.Priority) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrController, name), attribute.String(AttrQueuePriority, p.String())))
}

func (m *QueueMetrics) attrs(p priorityqueue.Priority) metric.MeasurementOption {
	switch p {
	case priorityqueue.Low:
		return m.low
	case priorityqueue.Normal:
		return m.normal
	}
	return priorityAttrs(m.name, p)
}

func (m *QueueMetrics) Added(p priorityqueue.Priority) {
	m.i.queueAdds.Add(context.Background(), 1, m.attrs(p))
}

func (m *QueueMetrics) Depth(p priorityqueue.Priority, delta int) {
	m.i.queueDepth.Add(context.Background(), int64(delta), m.attrs(p))
}

func (m *QueueMetrics) Waited(p priorityqueue.Priority, d time.Duration) {
	m.i.queueDuration.Record(context.Background(), d.Seconds(), m.attrs(p))
}

func (m *QueueMetrics) Unfinished(total, longest time.Duration) {
	attrs := ControllerAttr(m.name)
	m.i.unfinished.Record(context.Background(), total.Seconds(), attrs)
	m.i.longestUnfinished.Record(context.Background(), longest.Seconds(), attrs)
}

// ControllerAttr is the attribute set of the controller named name alone,
// as a measurement's option.
func ControllerAttr(name string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(attribute.String(AttrController, name)))
}
