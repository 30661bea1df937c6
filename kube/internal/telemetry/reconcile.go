package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The outcomes of a reconcile, as humus.kube.controller.reconcile.outcome
// records them: error is a key retried with backoff, panic a recovered
// panic, and success everything else, After included.
const (
	outcomeSuccess = "success"
	outcomeError   = "error"
	outcomePanic   = "panic"
)

// Reconcile records one reconcile: its root span, its log records and
// its humus.kube.controller.reconcile.duration, over the same time.
type Reconcile struct {
	t     *Telemetry
	span  trace.Span
	start time.Time
	attrs []any // the object and the controller, for log records
}

// StartReconcile starts the root span reconcile <Kind> of the object key
// names, with k8s.namespace.name (for a namespaced object) and
// humus.kube.object.name, and returns its context carrying the
// reconcile's loggers, whose records carry both, the controller's name
// and the span's ids (withLogger).
func (t *Telemetry) StartReconcile(ctx context.Context, kind, key string) (context.Context, *Reconcile) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	attrs := make([]attribute.KeyValue, 0, 2)
	objAttrs := make([]slog.Attr, 0, 3)
	if ns != "" {
		attrs = append(attrs, attribute.String(AttrNamespace, ns))
		objAttrs = append(objAttrs, slog.String(AttrNamespace, ns))
	}
	attrs = append(attrs, attribute.String(AttrObjectName, name))
	objAttrs = append(objAttrs, slog.String(AttrObjectName, name))
	logAttrs := make([]any, 0, len(objAttrs)+1)
	for _, a := range objAttrs {
		logAttrs = append(logAttrs, a)
	}
	logAttrs = append(logAttrs, slog.String(AttrController, t.name))

	start := time.Now()
	ctx, span := t.tracer.Start(ctx, "reconcile "+kind,
		trace.WithNewRoot(),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...),
	)
	ctx = t.withLogger(ctx, objAttrs)
	return ctx, &Reconcile{t: t, span: span, start: start, attrs: logAttrs}
}

// Succeeded ends the reconcile with the outcome success.
func (r *Reconcile) Succeeded() { r.end(outcomeSuccess) }

// Failed sets the span's status to Error, and emits one WARN record,
// reconcile failed, in the span's context, with the object and err as the
// record's error, as the token's warning carries its own: the SDK records
// it as OpenTelemetry's exception.message and exception.type.
func (r *Reconcile) Failed(ctx context.Context, err error) {
	r.span.SetStatus(codes.Error, err.Error())
	// otelslog takes an attribute whose value is an error as the record's
	// error, whatever its key.
	r.t.log.WarnContext(ctx, "reconcile failed", append(r.attrs, slog.Any("exception", err))...)
	r.end(outcomeError)
}

// Stopped ends the reconcile of a replica that may no longer work (its
// Lease no longer valid), or of a key that moved to another shard member,
// quietly: not as a failure, since the object's next owner reconciles it. The span ends without an error status, and
// one DEBUG record, reconcile stopped, carries err; the duration isn't
// recorded, the reconcile having no outcome of its own.
func (r *Reconcile) Stopped(ctx context.Context, err error) {
	r.t.log.DebugContext(ctx, "reconcile stopped", append(r.attrs, slog.String("reason", err.Error()))...)
	r.span.End()
}

// Panicked records a recovered panic, value raised on stack, as
// OpenTelemetry records an exception: an exception event on the span and
// its status Error, and one ERROR record, reconcile panicked, with the
// object and the same three exception attributes.
func (r *Reconcile) Panicked(ctx context.Context, value any, stack []byte) {
	r.t.exception(ctx, r.span, "reconcile panicked", r.attrs, value, stack)
	r.end(outcomePanic)
}

func (r *Reconcile) end(outcome string) {
	end := time.Now()
	r.span.End(trace.WithTimestamp(end))
	r.t.inst.reconcileDuration.Record(context.Background(), end.Sub(r.start).Seconds(),
		metric.WithAttributeSet(attribute.NewSet(
			attribute.String(AttrController, r.t.name),
			attribute.String(AttrOutcome, outcome),
		)))
}

// loggerKey is the context key of a reconcile's slog logger.
type loggerKey struct{}

// Logger returns the slog logger of the reconcile ctx is, as withLogger
// put it there, and whether there is one.
func Logger(ctx context.Context) (*slog.Logger, bool) {
	l, ok := ctx.Value(loggerKey{}).(*slog.Logger)
	return l, ok
}

// withLogger returns the reconcile's ctx carrying its loggers, for
// klog.FromContext and Logger, on the controller's handler with the
// object's attributes attrs and the controller's name, in the span
// context of ctx's span.
func (t *Telemetry) withLogger(ctx context.Context, attrs []slog.Attr) context.Context {
	h := reconcileHandler{
		Handler: t.handler.WithAttrs(append(attrs, slog.String(AttrController, t.name))),
		span:    trace.SpanContextFromContext(ctx),
	}
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(verbosity{Handler: h, min: t.min}))
	return context.WithValue(ctx, loggerKey{}, slog.New(h))
}

// reconcileHandler is a reconcile's log handler: a record made with a
// context that carries no span, as every one logr makes is (its slog
// bridge hands its handler context.Background()), is made in the
// reconcile span's context, so OpenTelemetry's slog bridge gives it the
// span's trace and span ids.
type reconcileHandler struct {
	slog.Handler
	span trace.SpanContext
}

func (h reconcileHandler) Handle(ctx context.Context, r slog.Record) error {
	if !trace.SpanContextFromContext(ctx).IsValid() && h.span.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, h.span)
	}
	return h.Handler.Handle(ctx, r)
}

func (h reconcileHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return reconcileHandler{Handler: h.Handler.WithAttrs(attrs), span: h.span}
}

func (h reconcileHandler) WithGroup(name string) slog.Handler {
	return reconcileHandler{Handler: h.Handler.WithGroup(name), span: h.span}
}
