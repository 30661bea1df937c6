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

// instrumentationScope is the instrumentation scope of everything kube
// records itself: the controller's spans, records and instruments, and
// the Client's records (transport.go).
const instrumentationScope = "github.com/z5labs/humus/kube"

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

	// handler is log's handler, and min klog's least level, for a
	// reconcile's loggers (reconcilelog.go).
	handler slog.Handler
	min     slog.Level
	inst    *instruments
	meter   metric.Meter // for the sharding instruments (sharding.go)
}

// newTelemetry builds the telemetry of the controller named name, whose
// client-go records pass up to klog verbosity v.
func newTelemetry(t humus.Telemetry, name string, v int) (*telemetry, error) {
	t = t.WithNoops()
	tp, mp, lp := t.TracerProvider, t.MeterProvider, t.LoggerProvider
	meter := mp.Meter(instrumentationScope)
	inst, err := newInstruments(meter, name)
	if err != nil {
		return nil, err
	}
	h := timeHandler{otelslog.NewHandler(instrumentationScope, otelslog.WithLoggerProvider(lp))}
	return &telemetry{
		name:    name,
		tracer:  tp.Tracer(instrumentationScope),
		log:     slog.New(h),
		klog:    logr.FromSlogHandler(verbosity{Handler: h, min: slog.Level(-v)}),
		handler: h,
		min:     slog.Level(-v),
		inst:    inst,
		meter:   meter,
	}, nil
}

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

// reconcileRecord records one reconcile: its root span, its log records and
// its humus.kube.controller.reconcile.duration, over the same time.
type reconcileRecord struct {
	t     *telemetry
	span  trace.Span
	start time.Time
	attrs []any // the object and the controller, for log records
}

// startReconcile starts the root span reconcile <Kind> of the object key
// names, with k8s.namespace.name (for a namespaced object) and
// humus.kube.object.name, and returns its context carrying the
// reconcile's loggers, whose records carry both, the controller's name
// and the span's ids (withLogger).
func (t *telemetry) startReconcile(ctx context.Context, kind, key string) (context.Context, *reconcileRecord) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	attrs := make([]attribute.KeyValue, 0, 2)
	objAttrs := make([]slog.Attr, 0, 3)
	if ns != "" {
		attrs = append(attrs, attribute.String(attrNamespace, ns))
		objAttrs = append(objAttrs, slog.String(attrNamespace, ns))
	}
	attrs = append(attrs, attribute.String(attrObjectName, name))
	objAttrs = append(objAttrs, slog.String(attrObjectName, name))
	logAttrs := make([]any, 0, len(objAttrs)+1)
	for _, a := range objAttrs {
		logAttrs = append(logAttrs, a)
	}
	logAttrs = append(logAttrs, slog.String(attrController, t.name))

	start := time.Now()
	ctx, span := t.tracer.Start(ctx, "reconcile "+kind,
		trace.WithNewRoot(),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...),
	)
	ctx = t.withLogger(ctx, objAttrs)
	return ctx, &reconcileRecord{t: t, span: span, start: start, attrs: logAttrs}
}

func (r *reconcileRecord) succeeded() { r.end(outcomeSuccess) }

// failed sets the span's status to Error, and emits one WARN record,
// reconcile failed, in the span's context, with the object and err as the
// record's error, as the token's warning carries its own: the SDK records
// it as OpenTelemetry's exception.message and exception.type.
func (r *reconcileRecord) failed(ctx context.Context, err error) {
	r.span.SetStatus(codes.Error, err.Error())
	// otelslog takes an attribute whose value is an error as the record's
	// error, whatever its key.
	r.t.log.WarnContext(ctx, "reconcile failed", append(r.attrs, slog.Any("exception", err))...)
	r.end(outcomeError)
}

// panicked records a recovered panic as OpenTelemetry records an exception:
// an exception event on the span and its status Error, and one ERROR
// record, reconcile panicked, with the object and the same three
// exception attributes.
func (r *reconcileRecord) panicked(ctx context.Context, p *panicError) {
	r.t.exception(ctx, r.span, "reconcile panicked", r.attrs, p)
	r.end(outcomePanic)
}

// exception records p on span as OpenTelemetry records an exception, an
// exception event and the status Error, and emits one ERROR record, body,
// with attrs and the same three exception attributes.
func (t *telemetry) exception(ctx context.Context, span trace.Span, body string, attrs []any, p *panicError) {
	typ := fmt.Sprintf("%T", p.value)
	msg := fmt.Sprint(p.value)
	stack := string(p.stack)
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String(attrExceptionType, typ),
		attribute.String(attrExceptionMessage, msg),
		attribute.String(attrExceptionStacktrace, stack),
	))
	span.SetStatus(codes.Error, "panic: "+msg)
	t.log.ErrorContext(ctx, body, append(attrs,
		slog.String(attrExceptionType, typ),
		slog.String(attrExceptionMessage, msg),
		slog.String(attrExceptionStacktrace, stack),
	)...)
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
