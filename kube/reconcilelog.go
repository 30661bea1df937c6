package kube

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

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
	if l, ok := ktel.Logger(ctx); ok {
		return l
	}
	return slog.New(logr.ToSlogHandler(klog.FromContext(ctx)))
}
