package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/z5labs/humus"
	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"
)

// controllerScope is the instrumentation scope of the controller's spans,
// records and instruments.
const controllerScope = "github.com/z5labs/humus/kube"

// The attributes the controller records. k8s.namespace.name is
// OpenTelemetry's; the others are humus's own, so they start with humus.
// (the spec's revision 3).
const (
	attrNamespace  = "k8s.namespace.name"
	attrObjectName = "humus.kube.object.name"
	attrController = "humus.kube.controller.name"
	attrOutcome    = "humus.kube.controller.reconcile.outcome"

	attrExceptionType       = "exception.type"
	attrExceptionMessage    = "exception.message"
	attrExceptionStacktrace = "exception.stacktrace"
)

// telemetry is everything a Controller records with, all from s.Telemetry
// under one scope. A nil provider records nothing.
type telemetry struct {
	name   string // Settings.Name, as humus.kube.controller.name
	tracer trace.Tracer
	log    *slog.Logger // the controller's own records
	klog   logr.Logger  // client-go's records, put in its context
	inst   *instruments
}

func newTelemetry(t humus.Telemetry, name string) (*telemetry, error) {
	t = t.WithNoops()
	tp, mp, lp := t.TracerProvider, t.MeterProvider, t.LoggerProvider
	inst, err := newInstruments(mp.Meter(controllerScope), name)
	if err != nil {
		return nil, err
	}
	h := otelslog.NewHandler(controllerScope, otelslog.WithLoggerProvider(lp))
	return &telemetry{
		name:   name,
		tracer: tp.Tracer(controllerScope),
		log:    slog.New(h),
		klog:   logr.FromSlogHandler(infoAndAbove{h}),
		inst:   inst,
	}, nil
}

// infoAndAbove passes on client-go's records of verbosity 0 and its
// errors, as klog shows by default, and drops its V(1) and above: routine
// detail such as a record for every Lease renewal, at V(5).
type infoAndAbove struct{ slog.Handler }

func (h infoAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}

func (h infoAndAbove) WithAttrs(attrs []slog.Attr) slog.Handler {
	return infoAndAbove{h.Handler.WithAttrs(attrs)}
}

func (h infoAndAbove) WithGroup(name string) slog.Handler {
	return infoAndAbove{h.Handler.WithGroup(name)}
}

// reconcileRecord records one reconcile: its root span, its log records and
// its humus.kube.controller.reconcile.duration, over the same time.
type reconcileRecord struct {
	t     *telemetry
	span  trace.Span
	start time.Time
	attrs []any // the object, for log records
}

// startReconcile starts the root span reconcile <Kind> of the object key
// names, with k8s.namespace.name (for a namespaced object) and
// humus.kube.object.name.
func (t *telemetry) startReconcile(ctx context.Context, kind, key string) (context.Context, *reconcileRecord) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	attrs := make([]attribute.KeyValue, 0, 2)
	logAttrs := make([]any, 0, 2)
	if ns != "" {
		attrs = append(attrs, attribute.String(attrNamespace, ns))
		logAttrs = append(logAttrs, slog.String(attrNamespace, ns))
	}
	attrs = append(attrs, attribute.String(attrObjectName, name))
	logAttrs = append(logAttrs, slog.String(attrObjectName, name))

	start := time.Now()
	ctx, span := t.tracer.Start(ctx, "reconcile "+kind,
		trace.WithNewRoot(),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...),
	)
	return ctx, &reconcileRecord{t: t, span: span, start: start, attrs: logAttrs}
}

func (r *reconcileRecord) succeeded() { r.end(outcomeSuccess) }

// failed sets the span's status to Error, and emits one WARN record,
// reconcile failed, in the span's context, with the object and err.
func (r *reconcileRecord) failed(ctx context.Context, err error) {
	r.span.SetStatus(codes.Error, err.Error())
	r.t.log.WarnContext(ctx, "reconcile failed", append(r.attrs, slog.String("error", err.Error()))...)
	r.end(outcomeError)
}

// panicked records a recovered panic as OpenTelemetry records an exception:
// an exception event on the span and its status Error, and one ERROR
// record, reconcile panicked, with the object and the same three
// exception attributes.
func (r *reconcileRecord) panicked(ctx context.Context, p *panicError) {
	typ := fmt.Sprintf("%T", p.value)
	msg := fmt.Sprint(p.value)
	stack := string(p.stack)
	r.span.AddEvent("exception", trace.WithAttributes(
		attribute.String(attrExceptionType, typ),
		attribute.String(attrExceptionMessage, msg),
		attribute.String(attrExceptionStacktrace, stack),
	))
	r.span.SetStatus(codes.Error, "panic: "+msg)
	r.t.log.ErrorContext(ctx, "reconcile panicked", append(r.attrs,
		slog.String(attrExceptionType, typ),
		slog.String(attrExceptionMessage, msg),
		slog.String(attrExceptionStacktrace, stack),
	)...)
	r.end(outcomePanic)
}

func (r *reconcileRecord) end(outcome string) {
	end := time.Now()
	r.span.End(trace.WithTimestamp(end))
	r.t.inst.reconcileDuration.Record(context.Background(), end.Sub(r.start).Seconds(),
		metric.WithAttributeSet(attribute.NewSet(
			attribute.String(attrController, r.t.name),
			attribute.String(attrOutcome, outcome),
		)))
}
