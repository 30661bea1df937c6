package kube

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// loggerKey is the context key of a reconcile's slog logger.
type loggerKey struct{}

// LoggerFrom returns the logger of the reconcile ctx is, or of the
// Finalize f it is handed: the slog face of the logger klog.FromContext
// returns from the same context, which client-go's own records of a call
// made with ctx go through too. Every record it makes reaches the App's
// LoggerProvider carrying the reconciled object (k8s.namespace.name, for
// a namespaced object, and humus.kube.object.name), the controller's
// Settings.Name (humus.kube.controller.name), and the trace and span ids
// of the reconcile's span, or of the span in the context a record is
// made with (slog's InfoContext and the like), such as a child span the
// Reconciler started. A time.Time or metav1.Time in a record's attributes
// is written as an RFC 3339 string (time.RFC3339Nano), not as the epoch
// nanoseconds OpenTelemetry's slog bridge makes of it.
//
// A context that is no reconcile's, such as a unit test's, gives a logger
// on the logr.Logger klog.FromContext(ctx) returns, which is klog's
// global logger when ctx carries none.
func LoggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
}

// withLogger returns the reconcile's ctx carrying its loggers, for
// klog.FromContext and LoggerFrom, on the controller's handler with the
// object's attributes attrs and the controller's name, in the span
// context of ctx's span.
func (t *telemetry) withLogger(ctx context.Context, attrs []slog.Attr) context.Context {
	h := reconcileHandler{
		Handler: t.handler.WithAttrs(append(attrs, slog.String(attrController, t.name))),
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

// timeHandler writes the times in a record's attributes as RFC 3339
// strings: OpenTelemetry's slog bridge turns a time.Time into an Int64 of
// epoch nanoseconds (otelslog's documented conversion of slog.KindTime),
// which no log format shows as a time, and a metav1.Time, a struct, into
// whatever its reflection gives.
type timeHandler struct{ slog.Handler }

func (h timeHandler) Handle(ctx context.Context, r slog.Record) error {
	changed := false
	r.Attrs(func(a slog.Attr) bool {
		changed = hasTime(a.Value)
		return !changed
	})
	if !changed {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(rfc3339(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h timeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = rfc3339(a)
	}
	return timeHandler{h.Handler.WithAttrs(out)}
}

func (h timeHandler) WithGroup(name string) slog.Handler {
	return timeHandler{h.Handler.WithGroup(name)}
}

// asTime returns the time v holds, if it holds one.
func asTime(v slog.Value) (time.Time, bool) {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindTime:
		return v.Time(), true
	case slog.KindAny:
		switch t := v.Any().(type) {
		case metav1.Time:
			return t.Time, true
		case *metav1.Time:
			if t != nil {
				return t.Time, true
			}
		case metav1.MicroTime:
			return t.Time, true
		case *metav1.MicroTime:
			if t != nil {
				return t.Time, true
			}
		case *time.Time:
			if t != nil {
				return *t, true
			}
		}
	}
	return time.Time{}, false
}

// hasTime reports whether v holds a time, or is a group that holds one.
func hasTime(v slog.Value) bool {
	if _, ok := asTime(v); ok {
		return true
	}
	if v = v.Resolve(); v.Kind() == slog.KindGroup {
		for _, a := range v.Group() {
			if hasTime(a.Value) {
				return true
			}
		}
	}
	return false
}

// rfc3339 is a with each time it holds as an RFC 3339 string.
func rfc3339(a slog.Attr) slog.Attr {
	if t, ok := asTime(a.Value); ok {
		return slog.String(a.Key, t.Format(time.RFC3339Nano))
	}
	if v := a.Value.Resolve(); v.Kind() == slog.KindGroup {
		group := v.Group()
		out := make([]slog.Attr, len(group))
		for i, g := range group {
			out[i] = rfc3339(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	}
	return a
}
