package kube

import (
	"github.com/z5labs/humus"

	ktel "github.com/z5labs/humus/kube/internal/telemetry"
)

// instrumentationScope is the instrumentation scope of everything kube
// records itself: the controller's spans, records and instruments, and
// the Client's records (transport.go).
const instrumentationScope = ktel.Scope

// attrController is the attribute humus.kube.controller.name, the
// controller's Settings.Name (internal/telemetry).
const attrController = ktel.AttrController

// telemetry is everything a Controller records with, all from s.Telemetry
// under one scope (internal/telemetry): a reconcile's span, records and
// duration (StartReconcile), a panic outside one (Panicked), the work
// queue's instruments (QueueMetrics), the gauge of the objects each
// informer caches (ObserveCaches), the controller's own records (Log),
// client-go's (Klog) and the meter of the sharding and storage migration
// instruments (Meter). A nil provider records nothing.
type telemetry = ktel.Telemetry

// newTelemetry builds the telemetry of the controller named name, whose
// client-go records pass up to klog verbosity v.
func newTelemetry(t humus.Telemetry, name string, v int) (*telemetry, error) {
	return ktel.New(t, name, v)
}
