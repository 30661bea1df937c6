// Package logattrs makes the attributes of kube's log records ones that
// OpenTelemetry's slog bridge (go.opentelemetry.io/contrib/bridges/otelslog)
// encodes as what they mean. The bridge encodes the built-in types only:
// a value of a named type of a basic kind (types.UID, a string) becomes
// the string "unhandled: (types.UID) …", a struct whatever %+v gives
// ({Namespace:ns Name:n} for a types.NamespacedName), and a time the Int64
// of its epoch nanoseconds, which no log format shows as a time.
//
// Handler wraps the bridge's handler so that every attribute kube records,
// in a record, a group or a logger's With, is converted before the bridge
// sees it: a time (time.Time, metav1.Time, metav1.MicroTime, or a pointer
// to one) becomes its RFC 3339 string; a value with a String method (a
// fmt.Stringer, such as types.NamespacedName's ns/name or
// schema.GroupVersionKind's) its string; a named type of a basic kind the
// basic value (types.UID a string); a list of such, a list of them; and
// an error is left as it is, which the bridge encodes as its message.
// NewLogger is a logger of one instrumentation scope through it.
//
// It holds no state.
package logattrs

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/otel/log"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NewLogger is the logger of the instrumentation scope through lp, the
// bridge's, with Handler's conversions.
func NewLogger(scope string, lp log.LoggerProvider) *slog.Logger {
	return slog.New(Handler(otelslog.NewHandler(scope, otelslog.WithLoggerProvider(lp))))
}

// Handler returns h, converting each attribute's value, as the package
// doc says, before h handles it.
func Handler(h slog.Handler) slog.Handler { return handler{h} }

type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	changed := false
	r.Attrs(func(a slog.Attr) bool {
		_, changed = convert(a.Value)
		return !changed
	})
	if !changed {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(Attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = Attr(a)
	}
	return handler{h.Handler.WithAttrs(out)}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{h.Handler.WithGroup(name)}
}

// Attr is a with its value converted, as the package doc says.
func Attr(a slog.Attr) slog.Attr {
	if v, ok := convert(a.Value); ok {
		return slog.Attr{Key: a.Key, Value: v}
	}
	return a
}

// convert returns v converted, and whether it changed.
func convert(v slog.Value) (slog.Value, bool) {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindTime:
		return slog.StringValue(v.Time().Format(time.RFC3339Nano)), true
	case slog.KindGroup:
		group := v.Group()
		var out []slog.Attr
		for i, g := range group {
			c, ok := convert(g.Value)
			if !ok {
				continue
			}
			if out == nil {
				out = append(make([]slog.Attr, 0, len(group)), group...)
			}
			out[i] = slog.Attr{Key: g.Key, Value: c}
		}
		if out == nil {
			return v, false
		}
		return slog.GroupValue(out...), true
	case slog.KindAny:
		a, ok := convertAny(v.Any())
		if !ok {
			return v, false
		}
		return slog.AnyValue(a), true
	}
	return v, false
}

// convertAny returns x converted, and whether it changed.
func convertAny(x any) (any, bool) {
	switch t := x.(type) {
	case nil, error, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr,
		float32, float64, time.Duration, []byte, []string:
		return x, false
	case time.Time:
		return t.Format(time.RFC3339Nano), true
	case *time.Time:
		if t != nil {
			return t.Format(time.RFC3339Nano), true
		}
	case metav1.Time:
		return t.Format(time.RFC3339Nano), true
	case *metav1.Time:
		if t != nil {
			return t.Format(time.RFC3339Nano), true
		}
	case metav1.MicroTime:
		return t.Format(time.RFC3339Nano), true
	case *metav1.MicroTime:
		if t != nil {
			return t.Format(time.RFC3339Nano), true
		}
	case fmt.Stringer:
		rv := reflect.ValueOf(x)
		if rv.Kind() == reflect.Pointer && rv.IsNil() {
			return x, false
		}
		return stringOf(t), true
	}
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Bool:
		return rv.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint(), true
	case reflect.Float32, reflect.Float64:
		return rv.Float(), true
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return x, false
		}
		out := make([]any, rv.Len())
		changed := false
		for i := range out {
			e := rv.Index(i).Interface()
			c, ok := convertAny(e)
			out[i], changed = c, changed || ok
		}
		if !changed {
			return x, false
		}
		return out, true
	case reflect.Pointer:
		if !rv.IsNil() {
			return convertAny(rv.Elem().Interface())
		}
	}
	return x, false
}

// stringOf is s.String(), or, when String panics (a method promoted from a
// nil embedded pointer, say), what fmt prints for such a value,
// %!v(PANIC=String method: …): a log call never panics for the value it
// records, as with slog's own handlers.
func stringOf(s fmt.Stringer) (str string) {
	defer func() {
		if r := recover(); r != nil {
			str = fmt.Sprintf("%v", s)
		}
	}()
	return s.String()
}
