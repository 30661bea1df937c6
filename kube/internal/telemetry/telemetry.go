// Package telemetry is what a controller records with: the spans, log
// records and instruments of its reconciles and its work queue, all from
// the App's humus Telemetry under one instrumentation scope, Scope, with
// OpenTelemetry's semantic-convention names where it has them
// (k8s.namespace.name, exception.*) and humus's own, starting with humus.,
// elsewhere.
//
// It owns Telemetry and New (a controller's spans, records, instruments
// and client-go's logger), Reconcile (one reconcile's root span, records
// and duration), Logger (a reconcile's slog logger), QueueMetrics (the
// work queue's measures), ObserveCaches (the gauge of the objects each
// informer caches) and the attribute names. Its invariants: every name,
// attribute, unit and bucket boundary is what dashboards and tests read,
// byte for byte; it touches no OpenTelemetry global: a nil provider
// records nothing; a reconcile is a root span; a time in a record's
// attributes is written as an RFC 3339 string; client-go's records pass
// only up to the controller's klog verbosity, and above V(8) as TRACE.
package telemetry

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"github.com/z5labs/humus"
	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/z5labs/humus/kube/internal/logattrs"
)

// Scope is the instrumentation scope of everything package kube records
// itself: the controller's spans, records and instruments, and the
// Client's records.
const Scope = "github.com/z5labs/humus/kube"

// The attributes the controller records. k8s.namespace.name is
// OpenTelemetry's; the others are humus's own, so they start with humus.
// (the spec's revision 3).
const (
	AttrNamespace  = "k8s.namespace.name"
	AttrObjectName = "humus.kube.object.name"
	AttrController = "humus.kube.controller.name"
	AttrOutcome    = "humus.kube.controller.reconcile.outcome"

	attrExceptionType       = "exception.type"
	attrExceptionMessage    = "exception.message"
	attrExceptionStacktrace = "exception.stacktrace"
)

// Telemetry is everything a Controller records with, all from a humus
// Telemetry under Scope. A nil provider records nothing.
type Telemetry struct {
	name   string // Settings.Name, as humus.kube.controller.name
	tracer trace.Tracer
	log    *slog.Logger // the controller's own records
	klog   logr.Logger  // client-go's records, put in its context

	// handler is log's handler, and min klog's least level, for a
	// reconcile's loggers (withLogger).
	handler slog.Handler
	min     slog.Level
	inst    *instruments
	meter   metric.Meter
	// cacheObjects is humus.kube.controller.cache.objects, observed by
	// the callback ObserveCaches registers while the informers run.
	cacheObjects metric.Int64ObservableGauge
}

// New builds the telemetry of the controller named name, whose
// client-go records pass up to klog verbosity v.
func New(t humus.Telemetry, name string, v int) (*Telemetry, error) {
	t = t.WithNoops()
	tp, mp, lp := t.TracerProvider, t.MeterProvider, t.LoggerProvider
	meter := mp.Meter(Scope)
	inst, err := newInstruments(meter, name)
	if err != nil {
		return nil, err
	}
	cacheObjects, err := newCacheObjects(meter)
	if err != nil {
		return nil, err
	}
	h := logattrs.Handler(otelslog.NewHandler(Scope, otelslog.WithLoggerProvider(lp))) // times as RFC 3339, named types as what they are
	return &Telemetry{
		name:    name,
		tracer:  tp.Tracer(Scope),
		log:     slog.New(h),
		klog:    logr.FromSlogHandler(verbosity{Handler: h, min: slog.Level(-v)}),
		handler: h,
		min:     slog.Level(-v),
		inst:    inst,
		meter:   meter,

		cacheObjects: cacheObjects,
	}, nil
}

// Log is the logger of the controller's own records.
func (t *Telemetry) Log() *slog.Logger { return t.log }

// Klog is the logger of client-go's records, to put in their context.
func (t *Telemetry) Klog() logr.Logger { return t.klog }

// Meter is the meter under Scope, for the controller's other instruments
// (sharding's, the storage migration's).
func (t *Telemetry) Meter() metric.Meter { return t.meter }

// QueueMetrics records the work queue's measures with the controller's
// instruments.
func (t *Telemetry) QueueMetrics() *QueueMetrics { return newQueueMetrics(t.inst, t.name) }

// levelTrace is the lowest slog level with an OpenTelemetry severity:
// otelslog adds 9, and TRACE is 1.
const levelTrace = slog.Level(-8)

// verbosity passes on client-go's records down to level min, and its
// errors. logr's slog bridge turns klog's V(n) into level -n, so min is
// -Settings.ClientGoVerbosity, and 0, the default, drops V(1) and above:
// routine detail such as a record for every Lease renewal, at V(5). A
// record above V(8) arrives as TRACE, not with no severity, which a
// processor that keeps only INFO and up would let through.
type verbosity struct {
	slog.Handler
	min slog.Level
}

func (h verbosity) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, max(l, levelTrace))
}

func (h verbosity) Handle(ctx context.Context, r slog.Record) error {
	r.Level = max(r.Level, levelTrace)
	return h.Handler.Handle(ctx, r)
}

func (h verbosity) WithAttrs(attrs []slog.Attr) slog.Handler {
	return verbosity{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h verbosity) WithGroup(name string) slog.Handler {
	return verbosity{Handler: h.Handler.WithGroup(name), min: h.min}
}

// Panicked records a panic recovered outside a reconcile, in a MapFunc or
// a References function, as a reconcile's is: a span named body with an
// exception event and status Error, and one ERROR record, body, with the
// object it was called for and the same three exception attributes. value
// is what recover returned, and stack the stack it was raised on.
func (t *Telemetry) Panicked(ctx context.Context, body, namespace, name string, value any, stack []byte) {
	var attrs []attribute.KeyValue
	var logAttrs []any
	if namespace != "" {
		attrs = append(attrs, attribute.String(AttrNamespace, namespace))
		logAttrs = append(logAttrs, slog.String(AttrNamespace, namespace))
	}
	attrs = append(attrs, attribute.String(AttrObjectName, name), attribute.String(AttrController, t.name))
	logAttrs = append(logAttrs, slog.String(AttrObjectName, name), slog.String(AttrController, t.name))
	ctx, span := t.tracer.Start(ctx, body, trace.WithNewRoot(), trace.WithAttributes(attrs...))
	defer span.End()
	t.exception(ctx, span, body, logAttrs, value, stack)
}

// exception records the panic value, raised on stack, on span as
// OpenTelemetry records an exception, an exception event and the status
// Error, and emits one ERROR record, body, with attrs and the same three
// exception attributes.
func (t *Telemetry) exception(ctx context.Context, span trace.Span, body string, attrs []any, value any, stack []byte) {
	typ := fmt.Sprintf("%T", value)
	msg := fmt.Sprint(value)
	st := string(stack)
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String(attrExceptionType, typ),
		attribute.String(attrExceptionMessage, msg),
		attribute.String(attrExceptionStacktrace, st),
	))
	span.SetStatus(codes.Error, "panic: "+msg)
	t.log.ErrorContext(ctx, body, append(attrs,
		slog.String(attrExceptionType, typ),
		slog.String(attrExceptionMessage, msg),
		slog.String(attrExceptionStacktrace, st),
	)...)
}
