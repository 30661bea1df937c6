package telemetry

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
